"""Whole-image analysis: every function, in forked workers, in address order.

``probes --all`` on a kernel means tens of thousands of functions.  They are
cut into chunks that worker processes analyse (forked, so they inherit the
open image instead of re-reading it) and the formatted lines come back in
chunk order, so the output is the same for any number of workers.
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Iterator, List, Tuple

from generator.analysis import report, summary
from generator.analysis.probes import analyse
from generator.common.errors import UserError
from generator.image.elf import KernelImage

CHUNK = 64  # functions per work item: small enough to balance, large enough to amortise the pickling

# The image and options the forked workers inherit.
_WORKER_IMG = None
_WORKER_ARGS: Tuple[str, bool, bool] = ("any", False, False)


def _work(chunk: Tuple[int, int]) -> List[str]:
    rule, as_json, as_summary = _WORKER_ARGS
    img = _WORKER_IMG
    isa = img.isa
    accel = summary.accelerator(isa)
    out = []
    for f in img.functions()[chunk[0] : chunk[1]]:
        if as_summary:
            rec = summary.fast(img, f, rule, isa, accel)
            out.append(report.summary_json(rec) if as_json else report.summary_text(rec))
        else:
            rep = analyse(img, f, rule, isa)
            out.append(report.function_json(rep) if as_json else report.function_text(rep))
    return out


def _chunks(total: int, size: int) -> List[Tuple[int, int]]:
    return [(i, min(i + size, total)) for i in range(0, total, size)]


def analyse_image(
    img: KernelImage, rule: str, as_json: bool, as_summary: bool, jobs: int = 0
) -> Iterator[Tuple[List[str], int]]:
    """Yield (the lines of the next chunk of functions, total functions), in address order."""
    global _WORKER_IMG, _WORKER_ARGS
    funcs = img.functions()
    if not funcs:
        raise UserError(f"{img.path}: no function symbols (stripped image?); use an unstripped kernel or its debug file")
    _WORKER_IMG, _WORKER_ARGS = img, (rule, as_json, as_summary)
    jobs = jobs or os.cpu_count() or 1
    chunks = _chunks(len(funcs), CHUNK)
    if jobs > 1 and len(chunks) > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(jobs) as pool:
            for lines in pool.imap(_work, chunks):
                yield lines, len(funcs)
    else:
        for c in chunks:
            yield _work(c), len(funcs)
