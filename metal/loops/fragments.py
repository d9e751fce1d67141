"""The pieces of group-level code the passes hand each other: a region (one loop over the group's threads),
code carried into a callee's first region, and text that remembers the regions it starts and ends with, so
that two regions with nothing between them can run as one loop."""

from __future__ import annotations

from typing import Callable


class Region(str):
    """A region's text: its threads' loop under ``mask``, running ``fragment`` for each."""

    mask: str
    fragment: str

    def __new__(cls, mask: str, fragment: str):
        text = super().__new__(cls, f"shimkit_g.region({mask}, [&](unsigned shimkit_t) __attribute__((always_inline)) -> bool "
                                    f"{{ {fragment} return true; }});")
        text.mask, text.fragment = mask, fragment
        return text


class Out(list):
    """A block's group-level code, piece by piece, without empty pieces (a region joins the one before
    it only where nothing stands between them)."""

    def append(self, text: str) -> None:
        if text.strip():
            super().append(text)


class Carried(str):
    """One thread's code from a caller, bound to its names, to run first in a callee's first region."""


class Text(str):
    """Group-level code; ``last`` is the region it ends with, followed by nothing but the ends of blocks
    (or None), and ``hidden`` the names those blocks declare; ``first`` the region it starts with, after
    nothing but the openings of blocks (or None)."""

    last: Region | None
    hidden: set[str]
    first: Region | None

    def __new__(cls, text: str, last: Region | None, hidden: set[str], first: Region | None = None):
        out = super().__new__(cls, text)
        out.last, out.hidden, out.first = last, hidden, first
        return out

    def map(self, edit: Callable[[str], str]) -> Text:
        def region(r: Region | None) -> Region | None:
            return Region(edit(r.mask), edit(r.fragment)) if r is not None else None
        return Text(edit(self), region(self.last), self.hidden, region(self.first))

    def without_first(self) -> Text:
        """The text with its first region taken out (it runs joined to the region before)."""
        assert self.first is not None
        at = self.index(self.first)
        return Text(self[:at] + self[at + len(self.first):], None if self.last is self.first else self.last,
                     self.hidden)


def ending(text: str, tail, hidden: set[str], head=None) -> Text:
    """``text`` as Text, where ``tail`` is the code it ends with (before the ends of its blocks) and
    ``head`` the code it starts with (after the openings of its blocks)."""
    first = head if isinstance(head, Region) else head.first if isinstance(head, Text) else None
    if first is not None and text[:text.index(first)].strip(" {"):
        first = None
    if isinstance(tail, Region):
        return Text(text, tail, hidden, first)
    if isinstance(tail, Text) and tail.last is not None:
        return Text(text, tail.last, hidden | tail.hidden, first)
    return Text(text, None, hidden, first)
