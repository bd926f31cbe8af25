"""Whole-image work: every function, in forked workers, in address order.

``probes --all`` and ``generate --all`` on a kernel mean tens of thousands of
functions.  They are cut into chunks that worker processes handle (forked,
so they inherit the open image instead of re-reading it) and the results
come back in chunk order, so the output is the same for any number of
workers.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import os
import shutil
from typing import TYPE_CHECKING, BinaryIO, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

from . import report, summary
from .exclusions import for_image
from .probes import analyse
from ..common.errors import UserError
from ..image.elf import Function, KernelImage
from ..isa import hostcore

if TYPE_CHECKING:
    from .fastjson import ImageJson

# Functions per work item, between these bounds: at least eight items per
# worker, so the workers end together, and no more than needed, because the
# pool costs the parent about half a millisecond per item (a kernel's 50,000
# functions in items of 64 kept it busy for 0.4 s).
CHUNK_MIN, CHUNK_MAX = 64, 1024

# Below this many bytes of functions a native summary is done before a
# second worker would have started: libstdc++'s 0.76 MB took 0.26 s in one
# process and 0.28 s in two, qemu's 2.2 MB 0.42 s and 0.34 s.
SERIAL_SUMMARY_BYTES = 1 << 20

R = TypeVar("R")

# What the forked workers inherit: the image, its functions and the work to do on each chunk.
_WORKER: Tuple[object, ...] = ()


def _work(chunk: Tuple[int, int]) -> list:
    img, funcs, fn = _WORKER
    return fn(img, funcs[chunk[0] : chunk[1]])


def _chunks(total: int, size: int) -> List[Tuple[int, int]]:
    return [(i, min(i + size, total)) for i in range(0, total, size)]


def workers(funcs: Sequence[Function], jobs: int = 0, serial_below: int = 0) -> int:
    """How many processes ``map_chunks`` works ``funcs`` with: ``jobs``, or one per CPU unless the work is
    smaller than ``serial_below`` bytes of functions."""
    if not jobs and serial_below and sum(f.size for f in funcs) < serial_below:
        return 1
    return jobs or os.cpu_count() or 1


def map_chunks(img: KernelImage, funcs: Sequence[Function], fn: Callable[[KernelImage, Sequence[Function]], List[R]],
               jobs: int = 0, serial_below: int = 0) -> Iterator[List[R]]:
    """Yield ``fn(img, chunk)`` for consecutive chunks of ``funcs``, in order, from ``jobs`` workers.

    The workers inherit ``fn`` and the image through fork; only the chunk
    bounds go to them, and what ``fn`` returns is pickled back, so it should
    be compact.  Unless ``jobs`` is given, work of fewer than ``serial_below``
    bytes of functions stays in this process.
    """
    global _WORKER
    _WORKER = (img, funcs, fn)
    jobs = workers(funcs, jobs, serial_below)
    chunks = _chunks(len(funcs), max(CHUNK_MIN, min(CHUNK_MAX, len(funcs) // (8 * jobs) or 1)))
    try:
        if jobs > 1 and len(chunks) > 1:
            # What exists now (the image, its symbols) lives as long as the
            # workers: frozen, the collector never walks it again and the
            # workers' pages stay shared with ours.
            gc.freeze()
            import multiprocessing  # here, not at the top: a small image never forks, and the import costs 8 ms

            ctx = multiprocessing.get_context("fork")
            with ctx.Pool(min(jobs, len(chunks))) as pool:
                yield from pool.imap(_work, chunks)
        else:
            for c in chunks:
                yield _work(c)
    finally:
        _WORKER = ()
        gc.unfreeze()


# A worker's JSON writer, kept across its chunks so that its encoding cache is reused.
_JSON: Dict[Tuple[int, str], ImageJson] = {}


def _json_writer(img: KernelImage, rule: str) -> ImageJson:
    from .fastjson import ImageJson  # here: a summary never writes full JSON

    key = (id(img), rule)
    if key not in _JSON:
        _JSON[key] = ImageJson(img, rule)
    return _JSON[key]


class Spilled:
    """A worker's chunk of output lines, left in a file for the parent to copy out.

    A kernel's full JSON is over a gigabyte; pickled back through the pool it
    is copied four times and cost more than the second worker saved (qemu:
    1.5 s with two workers, 1.2 s with one).  Through a file it is copied by
    the kernel, once each way.
    """

    __slots__ = ("path", "lines")

    def __init__(self, path: str, lines: int) -> None:
        self.path = path
        self.lines = lines

    def __len__(self) -> int:
        return self.lines

    def copy_to(self, stream: BinaryIO) -> None:
        """Append the lines to ``stream`` and remove the file."""
        try:
            with open(self.path, "rb") as src:
                stream.flush()
                sent = 0
                try:
                    size = os.fstat(src.fileno()).st_size
                    while sent < size:
                        n = os.sendfile(stream.fileno(), src.fileno(), sent, size - sent)
                        if n == 0:
                            raise OSError(f"{self.path} ended at {sent} of {size} bytes")
                        sent += n
                except (OSError, AttributeError, io.UnsupportedOperation):
                    src.seek(sent)  # sendfile cannot write to this stream: the rest by hand
                    shutil.copyfileobj(src, stream, 1 << 20)
        finally:
            os.unlink(self.path)


def _spill(writer: ImageJson, funcs: Sequence[Function], spill_dir: str) -> Spilled:
    import tempfile

    fd, path = tempfile.mkstemp(dir=spill_dir, suffix=".jsonl")
    try:
        writer.write(funcs, fd)
    finally:
        os.close(fd)
    return Spilled(path, len(funcs))


def _format(img: KernelImage, funcs: Sequence[Function], rule: str, as_json: bool, as_summary: bool,
            spill_dir: Optional[str] = None) -> Union[List[Union[str, bytes]], Spilled]:
    isa = img.isa
    if as_json and not as_summary:
        writer = _json_writer(img, rule)
        if spill_dir:
            return _spill(writer, funcs, spill_dir)
        return [writer.lines(funcs)] if funcs else []
    if as_summary:
        if as_json:
            return summary.fast_json_chunk(img, funcs, rule, isa)
        return [report.summary_text(r) for r in summary.fast_chunk(img, funcs, rule, isa)]
    out: List[Union[str, bytes]] = []
    for f in funcs:
        rep = analyse(img, f, rule, isa)
        out.append(report.function_json(rep) if as_json else report.function_text(rep))
    return out


def analyse_image(
    img: KernelImage, rule: str, as_json: bool, as_summary: bool, jobs: int = 0
) -> Iterator[Tuple[Union[List[Union[str, bytes]], Spilled], int]]:
    """Yield (the lines of the next chunk of functions, total functions), in address order.

    The lines are str or bytes, or for full JSON from several workers a
    ``Spilled`` file of them to copy out.
    """
    funcs = img.functions()
    if not funcs:
        raise UserError(f"{img.path}: no function symbols (stripped image?); use an unstripped kernel or its debug file")
    for_image(img)  # the exclusion list with the image's NMI closure: made once here, inherited by the workers
    serial_below = 0
    if as_summary and hostcore.for_isa(img.isa) is not None:  # loaded once here, before any worker forks
        serial_below = SERIAL_SUMMARY_BYTES
    if as_json and not as_summary:
        _json_writer(img, rule)  # its library loaded once, before any fork
    spill = as_json and not as_summary and workers(funcs, jobs) > 1
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kinstkit-json-") if spill else contextlib.nullcontext() as spill_dir:
        fn = functools.partial(_format, rule=rule, as_json=as_json, as_summary=as_summary, spill_dir=spill_dir)
        for lines in map_chunks(img, funcs, fn, jobs, serial_below):
            yield lines, len(funcs)
