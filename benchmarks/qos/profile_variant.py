"""Replay a trace with a variant of one of the server's search profiles, without editing it.

    python -m benchmarks.qos.profile_variant qos easy_head=true easy_head_depth=2 -- \\
        --trace kth-sp2 --limit-jobs 10000 --dispatcher pcp20 --predictor walltime \\
        --out runs/kth10-depth2

registers, in this process only, the profile "qos+easy_head=true+easy_head_depth=2" (the named
profile with those `SearchSettings` fields replaced; integers and true / false) and runs
`hpcdispatch simulate --in-process --profile qos+easy_head=true+easy_head_depth=2` with the
arguments after `--`. The profiles issue #49 retired are variants of `qos` so:
`promises` is `qos easy_head=true starvation_wait_s=0`, `packing` the same with
`capacity_first=true`, `fast` is `qos starvation_wait_s=0 work_conserving=false
protect_head=true`. In-process only: a server elsewhere does not know the variant. So an
exploratory setting is measured by a command that anyone can rerun, before it earns a profile of
its own.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any


def register(base: str, fields: Sequence[str]) -> str:
    """Add the variant of profile `base` with `fields` (KEY=VALUE each) to the server's
    profiles; returns its name. Raises ValueError naming an unknown profile, field or value."""
    from hpcdispatch.server.domain.profiles import PROFILES

    if base not in PROFILES:
        raise ValueError(f"unknown profile {base!r}; one of {sorted(PROFILES)}")
    settings, text = PROFILES[base]
    types = {f.name: type(getattr(settings, f.name)) for f in dataclasses.fields(settings)}
    changes: dict[str, Any] = {}  # int or bool, by the field's type
    for item in fields:
        key, sep, raw = item.partition("=")
        if not sep or key not in types or key == "profile":
            raise ValueError(f"{item!r}: not KEY=VALUE with KEY one of "
                             f"{sorted(k for k in types if k != 'profile')}")
        if types[key] is bool:
            if raw not in ("true", "false"):
                raise ValueError(f"{item!r}: {key} is true or false")
            changes[key] = raw == "true"
        else:
            try:
                changes[key] = int(raw)
            except ValueError:
                raise ValueError(f"{item!r}: {key} is an integer") from None
    name = "+".join([base, *fields])
    PROFILES[name] = (dataclasses.replace(settings, profile=name, **changes),
                      f"{base} with {', '.join(fields)}: {text}")
    return name


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    split = args.index("--") if "--" in args else len(args)
    p = argparse.ArgumentParser(prog="python -m benchmarks.qos.profile_variant",
                                description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("profile", help="the server profile to start from")
    p.add_argument("fields", nargs="*", help="KEY=VALUE, a SearchSettings field each")
    ours = p.parse_args(args[:split])
    try:
        name = register(ours.profile, ours.fields)
    except ValueError as e:
        p.error(str(e))
    from hpcdispatch.cli import main as cli

    return cli(["simulate", "--in-process", "--profile", name, *args[split + 1:]])


if __name__ == "__main__":
    sys.exit(main())
