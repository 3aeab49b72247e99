"""Cut a slice of consecutive job lines out of an SWF trace, keeping its header.

The bundled trace (data/) was made with

    write_slice("KTH-SP2-1996-2.1-cln.swf.xz", "KTH-SP2-1996-2.1-cln.slice.swf.xz",
                skip=7500, count=3000)

From a shell: `python -m hpcdispatch.sim_adapter.trace_slice SRC DST --skip N --count M`.
MaxJobs / MaxRecords are set to the slice's count and a Note says where the slice comes from;
every other header line and every job line is copied unchanged.
"""

from __future__ import annotations

import lzma
from pathlib import Path

from .swf import open_text, parse_record

_COUNT_KEYS = ("; MaxJobs:", "; MaxRecords:")


def write_slice(src: str | Path, dst: str | Path, skip: int, count: int) -> int:
    """Copy job lines skip+1 .. skip+count of `src` to `dst` (.xz); returns lines written."""
    header: list[str] = []
    jobs: list[str] = []
    seen = 0
    with open_text(src) as handle:
        for lineno, raw in enumerate(handle, start=1):
            line = raw.rstrip("\n")
            if line.startswith(";"):
                if not jobs and seen == 0:
                    header.append(line)
                continue
            if not line.strip():
                continue
            seen += 1
            if seen <= skip:
                continue
            parse_record(src, lineno, line)  # never ship a malformed line
            jobs.append(line)
            if len(jobs) == count:
                break
    out = []
    for line in header:
        if line.startswith(_COUNT_KEYS):
            line = f"{line.split(':', 1)[0]}: {len(jobs)}"
        out.append(line)
    out.append(f"; Note: slice of {Path(src).name}: job lines {skip + 1}..{skip + len(jobs)} "
               f"({len(jobs)} jobs), cut by hpcdispatch.sim_adapter.trace_slice")
    text = "\n".join(out + jobs) + "\n"
    with lzma.open(dst, "wt", encoding="utf-8", preset=9 | lzma.PRESET_EXTREME) as handle:
        handle.write(text)
    return len(jobs)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m hpcdispatch.sim_adapter.trace_slice",
        description="Cut job lines skip+1 .. skip+count of an SWF trace into an .xz file, "
                    "keeping its header.",
    )
    parser.add_argument("src", type=Path)
    parser.add_argument("dst", type=Path, help="output file (.swf.xz)")
    parser.add_argument("--skip", type=int, default=0, help="job lines to skip")
    parser.add_argument("--count", type=int, required=True, help="job lines to copy")
    args = parser.parse_args(argv)
    if args.skip < 0 or args.count < 1:
        parser.error("--skip must be >= 0 and --count >= 1")
    args.dst.parent.mkdir(parents=True, exist_ok=True)
    written = write_slice(args.src, args.dst, args.skip, args.count)
    print(f"{args.dst}: {written} jobs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
