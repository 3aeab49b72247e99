"""The search profiles retired by issue #49, each with the mode that replaces it: the server
refuses a request or a config file naming one with this text (never serving it by another
profile silently), and `hpcdispatch simulate --profile` says the same before a replay. Kept
apart from the server so that the client side reads it without importing the server."""

from __future__ import annotations

RETIRED: dict[str, str] = {
    "promises": "`book`: EASY's head is promised, and kept as a guarantee, by the promise book "
                "(`easy_head` true over `qos` sets the old profile's switches by hand)",
    "packing": "`book`: the promise book starts the most capacity now first (`capacity_first`) "
               "around the promises it holds",
    "fast": "`book` (the default), or `qos` for the same search (δ = 100 ms, k = 1) without "
            "promises; `papers` for the papers' objective",
}


def retired_profile(name: str) -> str | None:
    """Why `name` is no longer a profile and what replaces it; None if it never was one."""
    replacement = RETIRED.get(name)
    return None if replacement is None else (
        f"profile {name!r} was retired (issue #49); use {replacement}")
