"""``specplan acceptance``: replay a token trace through one exact drafter at a fixed K."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from specplan.cli.choices import TableFormat
from specplan.cli.output import console as make_console


def default_k(kind: str, depth: int) -> int:
    """K when --max-draft-len is not given: PLD's 10 continuation tokens, suffix decoding's tree depth
    (vLLM's default for num_speculative_tokens), otherwise 4 (specplan's default max_draft_len)."""
    return {"pld": 10, "suffix": depth}.get(kind, 4)


def write_steps(path: Path, steps) -> None:
    """One JSON line per request, ``{"id", "steps": [[position, [draft], accepted], ...]}``, written atomically."""
    from specplan.workloads.records import write_jsonl

    write_jsonl(({"id": g["id"].iloc[0], "steps": [[int(p), [int(t) for t in d], int(a)]
                                                   for p, d, a in zip(g["position"], g["draft"], g["accepted"])]}
                 for _, g in steps.groupby("rid", sort=True)), path)


def _tables(summary, k: int) -> list[Table]:
    main = Table(show_header=True, header_style="bold", title="Acceptance (vLLM spec-decode metrics)")
    for col in ("group", "reqs", "steps", "drafts", "drafted", "accepted", "accept len", "rate", "tok/step"):
        main.add_column(col, justify="left" if col == "group" else "right")
    pos = Table(show_header=True, header_style="bold", title="Per-position acceptance (share of drafts)")
    hist = Table(show_header=True, header_style="bold", title="Acceptance-length histogram (drafts)")
    pos.add_column("group")
    hist.add_column("group")
    for i in range(k):
        pos.add_column(str(i + 1), justify="right")
    for j in range(k + 1):
        hist.add_column(str(j + 1), justify="right")
    for row in summary.to_dict("records"):
        main.add_row(row["group"], str(row["requests"]), str(row["steps"]), str(row["drafts"]),
                     str(row["draft_tokens"]), str(row["accepted_tokens"]), f"{row['mean_acceptance_length']:.3f}",
                     f"{row['acceptance_rate']:.3f}", f"{row['tokens_per_step']:.3f}")
        pos.add_row(row["group"], *(f"{x:.3f}" for x in row["per_position"]))
        hist.add_row(row["group"], *(str(x) for x in row["histogram"]))
    return [main, pos, hist]


def acceptance(
    trace: str = typer.Argument(..., metavar="TRACE", help="A bundled trace name (see `specplan workloads list`) or a trace file."),
    drafter: str = typer.Option(..., "--drafter", metavar="DRAFTER", help="NGram | SA | vllm_ngram | suffix | pld (any case; "
                                "'-' for '_'): speculation.decoding_type."),
    max_draft_len: Optional[int] = typer.Option(None, "--max-draft-len", metavar="K", help="K (default: the drafter's)."),
    max_matching_ngram_size: Optional[int] = typer.Option(
        None, "--max-matching-ngram-size", metavar="N", help="NGram 2, SA -1 (longest), PLD 3 (reference) / 2 (hf) by default."),
    is_keep_all: bool = typer.Option(True, "--is-keep-all/--no-is-keep-all", help="NGram pool."),
    is_use_oldest: bool = typer.Option(True, "--is-use-oldest/--no-is-use-oldest", help="NGram pool."),
    is_public_pool: bool = typer.Option(True, "--is-public-pool/--no-is-public-pool", help="NGram pool."),
    enable_global_pool: bool = typer.Option(False, "--enable-global-pool/--no-enable-global-pool", help="SA."),
    global_pool_size: Optional[int] = typer.Option(None, "--global-pool-size", metavar="SLOTS", help="SA global pool slots."),
    max_batch_size: int = typer.Option(64, "--max-batch-size", metavar="N", help="Sets SA's default global_pool_size."),
    prompt_lookup_min: Optional[int] = typer.Option(None, "--prompt-lookup-min", metavar="N", help="vLLM n-gram."),
    prompt_lookup_max: Optional[int] = typer.Option(None, "--prompt-lookup-max", metavar="N", help="vLLM n-gram."),
    suffix_max_tree_depth: int = typer.Option(24, "--suffix-max-tree-depth", metavar="N"),
    suffix_max_cached_requests: int = typer.Option(10000, "--suffix-max-cached-requests", metavar="N", help="0: no global tree."),
    suffix_max_spec_factor: float = typer.Option(1.0, "--suffix-max-spec-factor", metavar="X"),
    suffix_max_spec_offset: float = typer.Option(0.0, "--suffix-max-spec-offset", metavar="X"),
    suffix_min_token_prob: float = typer.Option(0.1, "--suffix-min-token-prob", metavar="P"),
    pld_variant: str = typer.Option("reference", "--pld-variant", metavar="VARIANT", help="reference or hf (validated as speculation.pld_variant)."),
    eos_token_id: list[int] = typer.Option([], "--eos-token-id", metavar="ID", help="HF PLD cuts drafts before these; an output ending in one is not at its generation limit (repeatable)."),
    fmt: TableFormat = typer.Option(TableFormat.table, "--format", case_sensitive=False),
    dump_steps: Optional[Path] = typer.Option(None, "--dump-steps", metavar="FILE", help="Write every step as JSON lines here."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", metavar="DIR", help="Keep precomputed tables here (.npz)."),
) -> None:
    """Replay a token trace through one model-free drafter at a fixed K, one request at a time."""
    from specplan.acceptance.drafters import (
        DrafterSettings,
        PrecomputeCache,
        replay_trace,
        summarize_replay,
    )
    from specplan.acceptance.drafters.settings import KINDS
    from specplan.config_rules import canonical_decoding_type
    from specplan.errors import ConfigError
    from specplan.outputs import check_output_dir, check_output_file
    from specplan.workloads import load_workload

    kind = canonical_decoding_type(drafter)
    if kind not in KINDS:
        raise typer.BadParameter(f"--drafter must be one of {', '.join(KINDS)} (or their lower-case spellings)")
    if dump_steps is not None:
        check_output_file(dump_steps, "--dump-steps")
    if cache_dir is not None:
        check_output_dir(cache_dir, "--cache-dir")
    k = max_draft_len if max_draft_len is not None else default_k(kind, suffix_max_tree_depth)
    # The same pydantic model as a scenario's speculation section: the same values are refused alike.
    settings = DrafterSettings(
        kind=kind, source="specplan acceptance options", max_draft_len=k, max_matching_ngram_size=max_matching_ngram_size, is_keep_all=is_keep_all,
        is_use_oldest=is_use_oldest, is_public_pool=is_public_pool, enable_global_pool=enable_global_pool,
        global_pool_size=global_pool_size, prompt_lookup_min=prompt_lookup_min,
        prompt_lookup_max=prompt_lookup_max, suffix_max_tree_depth=suffix_max_tree_depth,
        suffix_max_cached_requests=suffix_max_cached_requests, suffix_max_spec_factor=suffix_max_spec_factor,
        suffix_max_spec_offset=suffix_max_spec_offset, suffix_min_token_prob=suffix_min_token_prob,
        pld_variant=pld_variant, eos_token_ids=tuple(eos_token_id))
    if k == 0:
        raise ConfigError("--max-draft-len: 0 drafts nothing; a replay needs K >= 1")
    requests = load_workload(trace)
    console = make_console(stderr=fmt == "json")
    console.print(f"Replaying {len(requests)} requests of {trace} through {drafter} at K={k} "
                  f"({settings.key()}).")
    cache = PrecomputeCache(cache_dir) if cache_dir is not None else None
    from specplan.cli.progress import progress_bar

    with progress_bar(f"replaying {len(requests)} requests"):  # elapsed only: the replay has no counter to poll
        steps = replay_trace(requests, settings, k, keep_drafts=dump_steps is not None, cache=cache,
                             max_batch_size=max_batch_size)
    summary = summarize_replay(steps, k)
    if dump_steps is not None:
        write_steps(dump_steps, steps)
    if fmt == "json":
        print(json.dumps({"trace": str(trace), "drafter": settings.kind, "k": k, "settings": settings.key(),
                          "groups": summary.to_dict("records")}))
        return
    for table in _tables(summary, k):
        console.print(table)


def register(app: typer.Typer) -> None:
    app.command()(acceptance)
