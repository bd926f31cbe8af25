"""Downloads: one streaming, hashing HTTP client for every fetch kinstkit does.

``fetch-release`` (release tarballs) and ``vm-image`` (VM images) both
download large files that must verify before anything is cached, and both
must turn every network failure into one line a person can act on.  Both use
this module; what they verify against (a MANIFEST, a CHECKSUM file) is theirs.
"""

from __future__ import annotations

import hashlib
import http.client
import socket
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Optional

from .errors import UserError

CHUNK = 1 << 20

Progress = Callable[[int, Optional[int]], None]


class FetchError(UserError):
    """A download that failed: not found, unreachable, cut short."""


def open_url(url: str, timeout: float):
    """``urlopen`` with the errors a person can act on turned into one line."""
    try:
        return urllib.request.urlopen(url, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise FetchError(f"{url}: not found (HTTP 404); check the release name and the mirror") from None
        raise FetchError(f"{url}: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        reason = e.reason.strerror if isinstance(e.reason, OSError) and e.reason.strerror else e.reason
        raise FetchError(f"{url}: cannot connect: {reason}; check the network or the mirror") from None
    except (socket.timeout, TimeoutError):
        raise FetchError(f"{url}: no answer within {timeout} s") from None
    except ValueError as e:
        raise FetchError(f"{url}: not a URL ({e})") from None
    except OSError as e:
        raise FetchError(f"{url}: cannot connect: {e}") from None


def fetch_text(url: str, timeout: float) -> str:
    """A small text file (a checksum list, a MANIFEST)."""
    with open_url(url, timeout) as resp:
        try:
            return resp.read().decode("utf-8", errors="replace")
        except (http.client.IncompleteRead, ConnectionError, socket.timeout, TimeoutError) as e:
            raise FetchError(f"{url}: truncated: {type(e).__name__}") from None


def download(url: str, dest: Path, algo: str, timeout: float, progress: Optional[Progress] = None) -> str:
    """Stream ``url`` into ``dest``; return its ``algo`` hex digest.

    A body shorter than its Content-Length, or cut off by the server, is an
    error and never a file the caller could mistake for complete.
    """
    h = hashlib.new(algo)
    got = 0
    resp = open_url(url, timeout)
    with resp, open(dest, "wb") as f:
        length = resp.headers.get("Content-Length")
        expected = int(length) if length and length.isdigit() else None
        while True:
            try:
                chunk = resp.read(CHUNK)
            except http.client.IncompleteRead as e:
                got += len(e.partial)
                raise FetchError(f"{url}: truncated: the server closed the connection after {got}"
                                 f"{f' of {expected}' if expected else ''} bytes") from None
            except (ConnectionError, socket.timeout, TimeoutError) as e:
                raise FetchError(f"{url}: truncated: download interrupted after {got} bytes ({e})") from None
            if not chunk:
                break
            try:
                f.write(chunk)
            except OSError as e:
                raise FetchError(f"{dest}: cannot write: {e.strerror}") from None
            h.update(chunk)
            got += len(chunk)
            if progress:
                progress(got, expected)
    if expected is not None and got != expected:
        raise FetchError(f"{url}: truncated: got {got} of {expected} bytes")
    return h.hexdigest()
