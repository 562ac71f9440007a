"""The formats on disk that connect the steps: prompt rows (mix writes, generate reads) and the output directory's rows
(generate writes, export and report read). Imports nothing of the steps."""
