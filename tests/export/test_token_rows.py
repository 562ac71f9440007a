"""Rows from recorded ids: chained while each prompt extends the previous ids, split where not, masks exact."""

from __future__ import annotations

from fleetgen.export.formats.token_rows import IdRow, chained_rows, rows_per_generation
from fleetgen.rows.token_ids import TurnIds

EOT, THINK_CLOSE = 2, 9


def test_turns_whose_prompts_extend_the_previous_ids_share_one_row():
    t0 = TurnIds([1, 5], [10, 11, EOT])
    t1 = TurnIds([1, 5, 10, 11, EOT, 198, 6], [20, EOT])
    assert chained_rows([t0, t1]) == [IdRow([1, 5, 10, 11, EOT, 198, 6, 20, EOT], [0, 0, 1, 1, 1, 0, 0, 1, 1], 1)]


def test_a_prompt_that_re_renders_an_earlier_turn_starts_a_new_row():
    t0 = TurnIds([1, 5], [10, 11, EOT])
    t1 = TurnIds([1, 5, 10, 12, EOT, 198, 6], [20, EOT])  # turn 0 re-encoded to other ids in the history
    t2 = TurnIds([1, 5, 10, 12, EOT, 198, 6, 20, EOT, 7], [30, EOT])
    rows = chained_rows([t0, t1, t2])
    assert rows == [
        IdRow([1, 5, 10, 11, EOT], [0, 0, 1, 1, 1], 0),
        IdRow([1, 5, 10, 12, EOT, 198, 6, 20, EOT, 7, 30, EOT], [0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 1], 2),
    ]
    # Every sampled id is supervised exactly once, and nothing else is.
    assert [i for r in rows for i, m in zip(r.input_ids, r.loss_mask) if m] == [10, 11, EOT, 20, EOT, 30, EOT]


def test_reasoning_context_masks_the_sampled_ids_up_to_the_last_think_close():
    t = TurnIds([1], [8, 40, 41, THINK_CLOSE, 50, EOT])
    assert chained_rows([t], THINK_CLOSE)[0].loss_mask == [0, 0, 0, 0, 0, 1, 1]
    assert chained_rows([TurnIds([1], [50, EOT])], THINK_CLOSE)[0].loss_mask == [0, 1, 1]  # no reasoning: all


def test_rows_per_generation_repeat_the_history_with_only_that_generation_supervised():
    t0 = TurnIds([1], [10, EOT])
    t1 = TurnIds([1, 10, EOT, 6], [20, EOT])
    assert rows_per_generation([t0, t1]) == [
        IdRow([1, 10, EOT], [0, 1, 1], 0),
        IdRow([1, 10, EOT, 6, 20, EOT], [0, 0, 0, 0, 1, 1], 1),
    ]
