"""Content-addressed response store (docs/architecture.md, "The response store").

Layout::

    <root>/segments/seg-<UTC time>-<host>-<pid>-<uuid>-<n>.parquet
    <root>/segments/seg-<UTC time>-<host>-<pid>-<uuid>-<n>-compacted.parquet   (time: the oldest merged)
    <root>/quarantine/<segment>            damaged segments, moved aside
    <root>/quarantine/<segment>.json       why, when, by whom, and which keys it held
    <root>/quarantine/cleared/             quarantined segments of unknown content, set aside by `clear`
    <root>/sealed.json                     marker: every segment of this store carries a checksum

Every writer (one Snakemake job) writes its own immutable segment per completed
batch: first under a hidden temp name, fsynced, then ``os.replace``d into place.
Nothing is ever appended to or rewritten in place, so many jobs on a shared
filesystem (NFS included) never need a lock, and a reader sees either a whole
segment or none. A temp file left behind by ``kill -9`` is never matched by the
reader's pattern.

Integrity: every segment (and every export) carries the sha256 of its own bytes
in the Parquet footer's key-value metadata (``context_effects.sha256``; the
digest is taken with those 64 characters read as ``0``), so a change to any byte
of the file - header, compressed column pages, footer, the digest itself - is
detected. A process checks the whole file the first time it reads a segment,
and again whenever the file's size or times change. A segment that fails (digest
mismatch, truncated, unreadable) is moved to ``quarantine/`` with a note and
named in a warning: its rows become store misses, so a normal rerun answers them
again and replay mode reports them as misses. Segments written before checksums
existed are read unchecked (one warning per process); ``compact`` rewrites them
with checksums. A segment without a checksum is damage (a stripped checksum, e.g. a
file rewritten with one answer changed) and is quarantined like any other wherever
the store shows it was written after checksums, so that no single deleted file
unseals the store: its footer names a writer that adds them (store format 2; the
writers before said 1, in the footer and in the embedded Arrow schema), a checksummed
segment's name sorts before it (names begin with their write time; a compaction's
output dates nothing), this process read it with a checksum, or the store is marked
sealed (``sealed.json``, written at creation, at the first open of a store with
checksummed segments only, and after a compaction). An export without a checksum
is refused by ``import`` unless ``--allow-unchecked`` says it predates checksums,
and one whose footer says it had one even then.

A quarantined segment whose keys cannot be read back (a zero-byte file) keeps
``verify`` from reporting clean, since the store cannot tell whether a rerun
answered its rows; after the rerun, ``clear`` moves it to ``quarantine/cleared/``.

Duplicate keys (two jobs racing on the same request) are harmless: the row from
the segment whose name sorts first wins, so every reader and ``compact`` agree.

Only successful results are stored: a failure must be retried next run, not
served from cache.

Modules, each importing only those listed before it:

``rows``
    the rows' schema, the request each row answers (its key), row <-> ``LLMResult``;
``segments``
    segment files and their integrity: the sealed write, checksum checks, salvaged
    keys of a damaged segment, the damage reports;
``responses``
    ``ResponseStore``: the index of keys, reads, writes, quarantine, verify, compact, stats;
``transfer``
    ``export`` of a whole store to one sealed file, ``import_file`` of such a file;
``cli`` (run as ``__main__``)
    the command line.

CLI (for reviewers replaying a finished run with zero model calls)::

    python -m context_effects.llm.store export ROOT OUT.parquet [--skip-damaged]
    python -m context_effects.llm.store import ROOT IN.parquet [--allow-unchecked]
    python -m context_effects.llm.store verify ROOT [--quarantine]
    python -m context_effects.llm.store stats ROOT
    python -m context_effects.llm.store compact ROOT
    python -m context_effects.llm.store clear ROOT SEGMENT
"""
