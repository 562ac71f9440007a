"""A report as a list of blocks (headings, text, tables, images), rendered to Markdown or HTML from one source."""

from __future__ import annotations

import html
from dataclasses import dataclass, field


def pct(p: float) -> str:
    """A percentage as the report writes it: one decimal."""
    return f"{p:.1f}%"


@dataclass
class Document:
    title: str
    blocks: list[tuple[str, object]] = field(default_factory=list)

    def heading(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def text(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, header: list[str], rows: list[list[object]]) -> None:
        self.blocks.append(("table", (header, rows)))

    def image(self, file: str, alt: str) -> None:
        self.blocks.append(("img", (file, alt)))

    def markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for kind, value in self.blocks:
            if kind == "h2":
                out += [f"## {value}", ""]
            elif kind == "p":
                out += [str(value), ""]
            elif kind == "table":
                header, rows = value  # type: ignore[misc]
                out.append("| " + " | ".join(header) + " |")
                out.append("|" + "|".join("---" for _ in header) + "|")
                for r in rows:
                    out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |")
                out.append("")
            elif kind == "img":
                file, alt = value  # type: ignore[misc]
                out += [f"![{alt}]({file})", ""]
        return "\n".join(out)

    def html(self) -> str:
        e = html.escape
        out = [
            "<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>{e(self.title)}</title>",
            "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px}"
            "img{max-width:100%}code{background:#f4f4f4}</style></head><body>",
            f"<h1>{e(self.title)}</h1>",
        ]
        for kind, value in self.blocks:
            if kind == "h2":
                out.append(f"<h2>{e(str(value))}</h2>")
            elif kind == "p":
                out.append(f"<p>{e(str(value))}</p>")
            elif kind == "table":
                header, rows = value  # type: ignore[misc]
                out.append("<table><tr>" + "".join(f"<th>{e(str(h))}</th>" for h in header) + "</tr>")
                for r in rows:
                    out.append("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>")
                out.append("</table>")
            elif kind == "img":
                file, alt = value  # type: ignore[misc]
                out.append(f"<p><img src='{e(file)}' alt='{e(alt)}'></p>")
        out.append("</body></html>")
        return "\n".join(out)
