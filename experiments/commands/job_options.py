"""``--job FILE``: one job file read by ``simulate``, ``plan`` and ``whatif`` as each command's own flags.

Why as flags: each command already checks and prices its flags; the job file only says them once, in one
vocabulary (samples per device, the cluster by name). The file's flags come first and the command line's
after, so a flag typed as well wins (``--job j.yaml --batch 64`` asks for the same job at another batch).
What the job meant for this command is printed first (on stderr with ``--json``) as the flags it became,
with the fields this command does not price said by name: a job's precision means nothing to ``whatif``,
and silence would suggest otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.compute import ZOO_TRANSFORMER_SHAPES
from flexcomm.costmodel.documents import read_document
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.job import GPT_SHAPE_KEYS, Job, global_batch, load_job

JOB_HELP = ("a job file (YAML or JSON: model, cluster, batch_per_device, and optionally gpt: {layers, hidden, "
            "heads, seq_len, vocab}, scheme, ratio, precision, attention, tp, pp, seed), read as this command's "
            "flags; a flag given as well wins (docs/jobs.md)")

#: A job field a command does not price, and why.
Unpriced = tuple[str, str]
#: The commands that take ``--job``, each with what it takes from it: the job's fields it prices.
JOB_COMMANDS = ("simulate", "plan", "whatif")


def add_job_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--job", help=JOB_HELP)


def _typed(typed: Sequence[str], flag: str) -> bool:
    return any(word == flag or word.startswith(flag + "=") for word in typed)


def _simulate_words(job: Job, typed: Sequence[str]) -> tuple[list[str], list[Unpriced]]:
    for mode in ("--from-trace", "--scenario"):
        if _typed(typed, mode):
            raise InputError("job", job.model, f"no --job with {mode} (the {mode[2:].replace('-', ' ')} describes "
                             "the job itself)")
    if _typed(typed, "--llm-plan"):
        # the plan file holds the model, layout, batch and precision; the job gives the cluster and the seed
        _check_plan_is_the_job(job, _value_of(typed, "--llm-plan"))
        return ["--cluster", job.cluster, *_optional(job, seed="--seed")], [
            (name, "the plan file's, checked against the job")
            for name in ("model", "gpt", "batch_per_device", "scheme", "ratio", "precision", "attention", "tp", "pp")]
    if _typed(typed, "--recovery") or _typed(typed, "--mtbf-study"):
        return ["--workload", job.model, "--cluster", job.cluster, *_optional(job, seed="--seed")], [
            ("batch_per_device", "recovery takes the model's published global batch, or --batch-size"),
            *((name, "recovery plans the job itself") for name in ("scheme", "ratio", "precision", "attention",
                                                                    "tp", "pp"))]
    if job.gpt is not None:
        raise InputError("job.model", job.model, "a model simulate prices on its own (a zoo name, a workloads model "
                         "or module:factory); a gpt shape is planned first, `flexcomm plan --job FILE`, and its "
                         "plan simulated with `flexcomm simulate --job FILE --llm-plan OUT/best_plan.json`")
    words = ["--workload", job.model, "--cluster", job.cluster]
    words += _optional(job, batch_per_device="--batch", scheme="--scheme", ratio="--ratio", seed="--seed")
    return words, [(name, "a data-parallel step in fp32") for name in ("precision", "attention", "tp", "pp")]


def _value_of(typed: Sequence[str], flag: str) -> str:
    for i, word in enumerate(typed):
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
        if word == flag and i + 1 < len(typed):
            return typed[i + 1]
    return ""


def _check_plan_is_the_job(job: Job, path: str) -> None:
    """A plan made for another job (another shape, layout, batch or cluster) is refused by the field that
    differs: simulating it would answer a question the job did not ask."""
    if not path:
        return  # the simulator names the missing value itself
    plan = read_document(path, "llm-plan", "plan file")
    if not isinstance(plan, dict):
        return  # the simulator refuses the file with its own reason
    best = plan.get("best") if isinstance(plan.get("best"), dict) else {}
    shape = plan.get("options") if isinstance(plan.get("options"), dict) else {}
    planned = {"cluster": plan.get("cluster"), "precision": plan.get("precision"), "attention": plan.get("attention"),
               "scheme": plan.get("scheme"), "ratio": plan.get("ratio"), "tp": best.get("tp"), "pp": best.get("pp")}
    asked: dict[str, object] = {"cluster": job.cluster, "precision": job.precision, "attention": job.attention,
                                "scheme": job.scheme, "ratio": job.ratio, "tp": job.tp, "pp": job.pp}
    if job.gpt is not None:
        for key in GPT_SHAPE_KEYS:
            planned[f"gpt.{key}"], asked[f"gpt.{key}"] = shape.get(key), getattr(job.gpt, key)
    batch = plan.get("batch_size")
    if job.batch_per_device is not None and isinstance(batch, int) and plan.get("cluster") == job.cluster:

        world = load_cluster(job.cluster).world_size
        planned["batch_per_device"] = batch // world if batch % world == 0 else batch / world
        asked["batch_per_device"] = job.batch_per_device
    for key, value in asked.items():
        if value is not None and planned.get(key) is not None and planned[key] != value:
            raise InputError(f"job.{key}", value, f"the plan's {planned[key]!r}: {path} was planned for another "
                             "job (plan this one with `flexcomm plan --job FILE`)")


def plan_job_fields(job: Job) -> dict[str, object]:
    """What ``job`` asks ``flexcomm plan`` for, as its option names (``flexcomm.plan``'s keywords): a zoo
    transformer or a ``gpt:`` shape becomes the GPT of that shape, the batch per device the global batch."""
    fields: dict[str, object] = {"cluster": job.cluster}
    shape = job.gpt
    if job.model in ZOO_TRANSFORMER_SHAPES:  # the zoo's transformer, planned as the GPT of its shape
        layers, hidden, seq, heads, vocab = ZOO_TRANSFORMER_SHAPES[job.model]
        fields.update(model="gpt", layers=layers, hidden=hidden, heads=heads, seq_len=seq, vocab=vocab)
    elif shape is not None:
        fields.update(model="gpt", layers=shape.layers, hidden=shape.hidden, heads=shape.heads, seq_len=shape.seq_len)
        if shape.vocab is not None:
            fields["vocab"] = shape.vocab
    else:
        fields["model"] = job.model
    batch = global_batch(job, load_cluster(job.cluster).world_size)
    if batch is not None:
        fields["batch_size"] = batch
    for name in ("scheme", "ratio", "precision", "attention", "tp", "pp", "seed"):
        if getattr(job, name) is not None:
            fields[name] = getattr(job, name)
    return fields


def _plan_words(job: Job, typed: Sequence[str]) -> tuple[list[str], list[Unpriced]]:
    words: list[str] = []
    for name, value in plan_job_fields(job).items():
        words += ["--" + name.replace("_", "-"), repr(value) if isinstance(value, float) else str(value)]
    return words, []


def _whatif_words(job: Job, typed: Sequence[str]) -> tuple[list[str], list[Unpriced]]:
    if job.gpt is not None:
        raise InputError("job.model", job.model, "a model whatif prices on its own (a zoo name, a workloads model or "
                         "module:factory); a gpt shape is priced by `flexcomm plan --job FILE`")
    words = ["--model", job.model, "--cluster", job.cluster] + _optional(job, batch_per_device="--batch")
    return words, [("scheme", "every scheme is ranked"), ("ratio", "every ratio is swept"),
                   *((name, "a data-parallel step in fp32") for name in ("precision", "attention", "tp", "pp")),
                   ("seed", "nothing random")]


_WORDS: dict[str, Callable[[Job, Sequence[str]], tuple[list[str], list[Unpriced]]]] = {
    "simulate": _simulate_words, "plan": _plan_words, "whatif": _whatif_words}


def _optional(job: Job, **flags: str) -> list[str]:
    words: list[str] = []
    for name, flag in flags.items():
        value = getattr(job, name)
        if value is not None:
            words += [flag, repr(value) if isinstance(value, float) else str(value)]
    return words


def job_words(job: Job, command: str, typed: Sequence[str] = ()) -> tuple[list[str], list[Unpriced]]:
    """The flags ``job`` is for ``command`` (given the flags ``typed`` with it), and the fields it set that
    this command does not price, each with why."""
    words, unpriced = _WORDS[command](job, typed)
    given = set(job.given())
    return words, [(name, why) for name, why in unpriced if name in given]


def _job_value(words: Sequence[str]) -> tuple[int, str] | None:
    """Where ``--job`` is in ``words`` and its value (``--job F`` or ``--job=F``)."""
    for i, word in enumerate(words):
        if word == "--job" and i + 1 < len(words):
            return i, words[i + 1]
        if word.startswith("--job="):
            return i, word.split("=", 1)[1]
    return None


def with_job(words: Sequence[str]) -> list[str]:
    """``words`` with a ``--job FILE`` after the command expanded into the job's flags, placed before the
    typed ones (the last of a repeated flag wins in argparse). Words without ``--job`` come back as they are."""
    words = list(words)
    found = _job_value(words[1:]) if words else None
    if found is None:
        return words
    if words[0] not in JOB_COMMANDS:
        raise InputError("job", found[1], "an option of " + ", ".join(JOB_COMMANDS) + " only (flexcomm "
                         f"{words[0]} prices no whole job)")
    _, path = found
    if not path:
        raise InputError("job", path, "a job file (YAML or JSON)")
    job = load_job(path)
    flags, unpriced = job_words(job, words[0], words[1:])
    note = f"job {path}: flexcomm {words[0]} {' '.join(flags)}"
    if unpriced:
        reasons: dict[str, list[str]] = {}
        for name, why in unpriced:
            reasons.setdefault(why, []).append(name)
        note += f"; not used by {words[0]}: " + "; ".join(f"{', '.join(names)} ({why})"
                                                          for why, names in reasons.items())
    # first on the report a reader sees; on stderr where stdout must stay one JSON document
    print(note, file=sys.stderr if "--json" in words else sys.stdout)
    return [words[0], *flags, *words[1:]]
