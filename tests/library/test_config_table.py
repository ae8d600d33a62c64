"""The fast path's configuration tables (rmsnorm/config.py): data scanned in order, and unchanged choices.

tests/data/config_before.csv holds what forward_config and backward_config chose at every N in
1..262144, every x dtype and both layouts (rows in any layout; dense rows, where a flat rule may apply),
as last recorded (tools/record_config.py, run-length encoded per parity of N): a change to the rules
that moves a choice must re-record it, in the commit that says why. The functions must choose exactly
that, and each choice must be the first row of render_rules() that matches, read here without the
library's matching code.
"""

import csv
import dataclasses
from pathlib import Path

import pytest
import torch
import triton

from rmsnorm import config
from rmsnorm.config import (
    LAYERNORM_BACKWARD_ONE_BLOCK_MAX_N,
    FastConfig,
    backward_config,
    forward_config,
    layernorm_backward_config,
    render_rules,
)

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "config_before.csv"
FUNCTIONS = {"forward": forward_config, "backward": backward_config}
DTYPES = ("float32", "float16", "bfloat16")
MAX_N = 262144
FIELDS = [f.name for f in dataclasses.fields(FastConfig)]


def _value(cell: str):
    return None if cell == "" else cell == "True" if cell in ("True", "False") else int(cell)


def _fixture() -> dict:
    """{(pass_, dtype, dense_rows): {N: FastConfig}} for every N of 1..MAX_N, from the run-length rows."""
    table = {(p, d, dense): {} for p in FUNCTIONS for d in DTYPES for dense in (False, True)}
    with open(FIXTURE, newline="") as f:
        for row in csv.DictReader(f):
            # a column FastConfig no longer has held its default everywhere (reverse_second_pass: False)
            gone = row.keys() - set(FIELDS) - {"pass_", "dtype", "dense_rows", "parity", "N_first", "N_last"}
            assert all(row[k] == "False" for k in gone)
            cfg = FastConfig(**{k: _value(row[k]) for k in FIELDS if k in row})
            first, last = int(row["N_first"]), int(row["N_last"])
            assert first % 2 == (1 if row["parity"] == "odd" else 0) and (last - first) % 2 == 0
            for N in range(first, last + 1, 2):
                table[row["pass_"], row["dtype"], _value(row["dense_rows"])][N] = cfg
    assert all(sorted(by_n) == list(range(1, MAX_N + 1)) for by_n in table.values())  # every N, once
    return table


@pytest.fixture(scope="module")
def before():
    return _fixture()


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("pass_", list(FUNCTIONS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_table_chooses_what_the_functions_chose_before(before, pass_, dtype, dense):
    choose = FUNCTIONS[pass_].__wrapped__  # uncached: 262144 keys
    changed = [N for N, cfg in before[pass_, dtype, dense].items() if choose(N, getattr(torch, dtype), dense) != cfg]
    assert changed == [], f"{pass_} {dtype}: {len(changed)} N choose differently, from N = {changed[:5]}"


def _first_row(rows: list[dict], N: int, dtype: str, dense: bool = False, required: bool = True) -> dict | None:
    for row in rows:
        kinds = {"any", "odd" if N % 2 else "even"}
        if N % 2 == 0 and N & (N - 1):
            kinds.add("even, not a power of two")
        parity = row["parity"] in kinds
        if row["N_first"] <= N and (row["N_last"] is None or N <= row["N_last"]) and parity and \
                dtype in row["dtypes"].split(", ") and (dense or not row["flat"]):
            return row
    if required:
        raise AssertionError(f"no row of the table matches N = {N}, {dtype}")
    return None


def _config_of_row(row: dict, N: int) -> FastConfig:
    """The configuration a rendered row gives at N, read from the row's plain values."""
    block_n = triton.next_power_of_2(N) if row["BLOCK_N"] is None else row["BLOCK_N"]
    return FastConfig(BLOCK_M=max(1, row["step"] // block_n), BLOCK_N=block_n, num_warps=row["num_warps"],
                      programs_per_sm=row["programs_per_sm"], num_stages=row["num_stages"],
                      static_n=row["static_n"], flat=row["flat"])


def _evidence_rows(evidence: str) -> tuple[str, str, list[int]]:
    """(pass_, dtype, widths) an ``evidence`` string names: "<file>: <pass>, <dtype>, N=<a>, <b>-<c>: why"."""
    _, what = evidence.split(": ", 1)
    pass_, dtype, ns = what.split(": ")[0].split(", ", 2)
    return pass_, dtype, [int(n) for n in ns.removeprefix("N=").replace("-", ", ").split(", ")]


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("pass_", list(FUNCTIONS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_each_choice_is_the_first_rendered_row_that_matches(pass_, dtype, dense):
    rows = render_rules(pass_)
    choose = FUNCTIONS[pass_].__wrapped__
    for N in range(1, MAX_N + 1):
        row = _first_row(rows, N, dtype, dense)
        assert choose(N, getattr(torch, dtype), dense) == _config_of_row(row, N), (N, row)


@pytest.mark.parametrize("pass_", list(FUNCTIONS))
def test_every_rule_is_chosen_somewhere_and_names_its_rows(pass_):
    """No rule is shadowed by the rows above it, and each says which rows of fast_tuning.csv chose it."""
    rows = render_rules(pass_)
    used = {id(_first_row(rows, N, d, dense)) for d in DTYPES for dense in (False, True)
            for N in range(1, 2 * 16384 + 3)}
    assert used == {id(r) for r in rows}
    # a flat rule is never the choice for rows in any layout: the flat kernels need one dense run
    assert not any(_first_row(rows, N, d)["flat"] for d in DTYPES for N in range(1, 2 * 16384 + 3))
    assert all(r["evidence"].startswith(f"fast_tuning.csv: {pass_}, ") and "N=" in r["evidence"] for r in rows)


def test_evidence_names_rows_that_exist():
    """Each rule's evidence names (pass_, dtype, N) rows that results/h200/fast_tuning.csv holds."""
    with open(Path(__file__).resolve().parents[2] / "results" / "h200" / "fast_tuning.csv", newline="") as f:
        timed = {(r["pass_"], r["dtype"], int(r["N"])) for r in csv.DictReader(f) if r["us"]}
    for pass_ in FUNCTIONS:
        for row in render_rules(pass_):
            p, dtype, widths = _evidence_rows(row["evidence"])
            assert p == pass_ and all((pass_, dtype, n) in timed for n in widths), row["evidence"]


def test_invalid_keys_are_refused():
    with pytest.raises(ValueError, match="no backward configuration"):
        backward_config.__wrapped__(4096, torch.float64)
    with pytest.raises(ValueError, match="no forward configuration"):
        forward_config.__wrapped__(0, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_layernorm_backward_holds_no_row_past_its_limit_in_one_block_and_is_the_rmsnorms_elsewhere(dtype):
    last = config.BACKWARD_RULES[-1]
    assert last.N_max is None and last.block is not None  # the widest rows loop, without an end: their tiles
    widest_rule = backward_config(4 * LAYERNORM_BACKWARD_ONE_BLOCK_MAX_N, dtype)
    for N in (*range(1, 70), 255, 257, 4095, 4096, 8191, 8192, 8193, 12288, 12289, 16383, 16384, 16385, 65536):
        rms, ln = backward_config(N, dtype), layernorm_backward_config(N, dtype)
        if N > LAYERNORM_BACKWARD_ONE_BLOCK_MAX_N and rms.one_block(N):
            assert not ln.one_block(N) and ln == widest_rule, N  # the widest rows' loop
        else:
            assert ln == rms, N
    assert backward_config(16384, dtype).one_block(16384)  # the case the rule is for occurs in the table
    assert not layernorm_backward_config(16384, dtype).one_block(16384)


LAYERNORM_EVIDENCE = Path(__file__).resolve().parents[2] / "results" / "h100" / "layernorm_tuning.csv"


def _timed_forward_rows(evidence: str) -> set:
    """(pass_, dtype, N) of the timed rows of the results/h100 sweep an ``evidence`` string names first."""
    name = evidence.split(": ", 1)[0]
    assert name.startswith("layernorm_tuning") and name.endswith(".csv"), evidence
    with open(LAYERNORM_EVIDENCE.parent / name, newline="") as f:
        return {(r["pass_"], r["dtype"], int(r["N"])) for r in csv.DictReader(f) if r["us"] and not r["error"]}


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_layernorm_forward_takes_its_first_rule_else_the_rmsnorms_blocked_choice(dtype):
    rows = render_rules("layernorm_forward")
    for N in range(1, 2 * 65536 + 3):
        own = _first_row(rows, N, dtype, required=False)
        got = config.layernorm_forward_config.__wrapped__(N, getattr(torch, dtype))
        if own is None:
            assert got == forward_config(N, getattr(torch, dtype)), N  # rows in any layout: never a flat rule
        else:
            assert got == _config_of_row(own, N), (N, own)
        assert not got.flat and got.split == 1, N


def test_every_layernorm_forward_rule_is_chosen_and_names_rows_its_sweep_timed():
    """Each rule matches some N first (none is shadowed) and its evidence names (dtype, N) rows of a LayerNorm
    forward sweep, the rows that chose it."""
    rows = render_rules("layernorm_forward")
    assert rows, "the LayerNorm's forward has rules of its own"
    for i, row in enumerate(rows):
        timed = _timed_forward_rows(row["evidence"])
        first = [N for N in range(row["N_first"], row["N_last"] + 1)
                 if not any(r["N_first"] <= N <= r["N_last"] for r in rows[:i])]
        assert first, row
        assert not row["flat"] and row["evidence"].split(": ", 2)[1].startswith("forward, "), row
        _, dtype, widths = _evidence_rows(row["evidence"])
        assert dtype in row["dtypes"].split(", ") and all(("forward", dtype, n) in timed for n in widths), row
        assert all(row["N_first"] <= n <= row["N_last"] for n in widths), row


def test_each_layernorm_forward_rule_is_within_1_percent_of_the_best_its_sweep_timed():
    """Where a rule's evidence names a width, its sweep timed the rule's own configuration there, for every weight
    dtype the sweep ran at that width, and it is within 1 % of the fastest configuration of that run (a rule
    taken from a sweep it does not win reads as a rule that still holds)."""
    import pandas as pd

    from rmsnorm_lab.tuning import config_of

    for rule in config.LAYERNORM_FORWARD_RULES:
        sweep = pd.read_csv(LAYERNORM_EVIDENCE.parent / rule.evidence.split(": ", 1)[0])
        _, dtype, widths = _evidence_rows(rule.evidence)
        timed = sweep[sweep["us"].notna() & sweep["error"].isna() & (sweep["pass_"] == "forward")
                      & (sweep["dtype"] == dtype)]
        for n in widths:
            runs = timed[timed["N"] == n].groupby(["M", "weight_dtype"])
            assert runs.ngroups, (rule.evidence, n)
            for run, rows in runs:
                mine = rows[[config_of(r) == rule.config(n) for _, r in rows.iterrows()]]["us"]
                assert len(mine), (rule.evidence, n, run, "the rule's configuration was not timed")
                assert mine.min() <= 1.01 * rows["us"].min(), (rule.evidence, n, run)


def test_the_layernorm_forward_rules_leave_the_rmsnorms_choices_alone():
    """The RMSNorm's forward never reads the LayerNorm's rules: no choice of forward_config is a LayerNorm rule's
    where that rule matches (test_the_table_chooses_what_the_functions_chose_before holds it to its fixture); the
    LayerNorm's choice differs from it where a rule of its own matches, and only there."""
    for N in (768, 1280, 8192, 12288, 65536):
        rule = next(r for r in config.LAYERNORM_FORWARD_RULES if r.matches(N, "bfloat16"))
        assert forward_config.__wrapped__(N, torch.bfloat16) != rule.config(N)
        assert config.layernorm_forward_config(N, torch.bfloat16) == rule.config(N), N
    for N in (1, 257, 512, 4096, 4097, 131072):  # no rule of its own: the RMSNorm's blocked choice
        assert config.layernorm_forward_config(N, torch.bfloat16) == forward_config(N, torch.bfloat16), N


def _forward_ratio(name: str) -> dict:
    """{(M, N, dtype): the best peer's forward time over the fast LayerNorm's} of a results/h100 side by side."""
    with open(LAYERNORM_EVIDENCE.parent / name, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["pass_"] == "forward" and r["check"] == "ok"]
    by_shape = {}
    for r in rows:
        by_shape.setdefault((int(r["M"]), int(r["N"]), r["dtype"]), {})[r["provider"]] = float(r["us"])
    return {k: min(t for p, t in v.items() if p != "fast") / v["fast"] for k, v in by_shape.items() if "fast" in v}


def test_where_a_layernorm_forward_rule_applies_the_side_by_side_holds_or_gains():
    """Run before and after the rules (each against the peers of its own run): at every shape of the grid whose
    forward takes a rule of its own, the best peer over the fast LayerNorm is at least 0.98 of what it was."""
    before, after = _forward_ratio("layernorm_kernel_before_rules.csv"), _forward_ratio(
        "layernorm_kernel_after_rules.csv")
    ruled = [k for k in before if config.layernorm_forward_config(k[1], getattr(torch, k[2])) != forward_config(
        k[1], getattr(torch, k[2]))]
    assert len(ruled) >= 8 and all(k in after for k in ruled)
    assert [k for k in ruled if after[k] < 0.98 * before[k]] == []
    assert sum(after[k] > 1.02 * before[k] for k in ruled) >= len(ruled) // 2  # and most gain
