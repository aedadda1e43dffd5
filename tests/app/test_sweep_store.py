"""The sweep store against machines, users and damaged files: kill -9 at each write / fsync /
rename, the folder lock (second writer, stale lock), every corruption kind of records.jsonl with the exact counts its messages give, the manifest
rebuilt from the records and the options, --overwrite, a full disk, a read-only folder.

Each corruption test starts from a store of KEYS (3 records per grid point), edits the file the
way the corruption happens, reopens it, checks the report's exact counts, then finishes the sweep
and checks the records against an uninterrupted store: nothing lost, nothing duplicated.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from subgpu_jax.app import safeio
from subgpu_jax.app import store as S
from subgpu_jax.app.fingerprint import block_and_sums, grid_fingerprint, normalise
from subgpu_jax.app.store import SweepStore, checksum

META = {"model": "m", "batches": (256, 512), "parallelisms": [(8, 1, 8)]}
KEYS = [f"G{g}-D{d}" for g in (256, 512) for d in (1, 2, 3)]


def score(key: str) -> list[dict]:
    """Three deterministic records describing grid point ``key``."""
    g, d = (int(x[1:]) for x in key.split("-"))
    return [{"G": g, "D": d, "i": i, "makespan_us": 1000.0 + 7.5 * g / (d + i)}
            for i in range(3)]


def matches_key(key: str, rec: dict) -> str | None:
    """The store's record-vs-grid-key check for ``score``'s records."""
    want = f"G{rec.get('G')}-D{rec.get('D')}"
    return None if want == key else f"record describes {want}, filed under {key}"


def open_store(folder, meta=META, **kw) -> SweepStore:
    return SweepStore(str(folder), meta, keys=KEYS, check_record=matches_key, **kw)


def finish(folder, meta=META) -> SweepStore:
    """Open, evaluate every missing grid point, close; returns the (closed) store."""
    s = open_store(folder, meta)
    for k in KEYS:
        if k not in s.done:
            s.add(k, score(k))
    s.close()
    return s


def reference() -> list[dict]:
    return sorted((dict(r, grid_key=k) for k in KEYS for r in score(k)),
                  key=lambda r: (r["grid_key"], r["i"]))


def assert_same_as_reference(folder) -> None:
    """Reopened store == uninterrupted run: no record lost, none duplicated, clean file."""
    s = open_store(folder)
    s.close()
    got = sorted(s.records, key=lambda r: (r["grid_key"], r["i"]))
    assert got == reference()
    assert sorted(s.done) == sorted(KEYS)
    assert not s.report, s.report.lines()
    assert not [f for f in os.listdir(folder) if f.endswith(".tmp")]


@pytest.fixture
def full(tmp_path):
    """A finished store of every KEY; returns (folder, its records.jsonl lines)."""
    finish(tmp_path)
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(lines) == 4 * len(KEYS)
    return tmp_path, lines


def write_lines(folder, lines, newline=True) -> None:
    (folder / "records.jsonl").write_text("\n".join(lines) + ("\n" if newline else ""))


# ---------------------------------------------------------------------------------- the lock
def test_second_writer_refused_naming_pid(tmp_path):
    s = open_store(tmp_path)
    with pytest.raises(ValueError, match=rf"in use by another run \(PID {os.getpid()} "):
        open_store(tmp_path)
    s.close()
    open_store(tmp_path).close()  # released: the next run opens it


def test_two_processes_race_one_wins(tmp_path):
    """Two processes start at once on one folder: exactly one writes; the other exits with the
    lock error naming the winner's PID; every grid point is stored once."""
    script = textwrap.dedent(f"""
        import importlib.util, os, sys, time
        spec = importlib.util.spec_from_file_location("st", {S.__file__!r})
        st = sys.modules['st'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(st)
        keys, folder, flags = {KEYS!r}, sys.argv[1], sys.argv[2]
        try:
            s = st.SweepStore(folder, {json.loads(json.dumps(META))!r}, keys=keys)
        except ValueError as e:
            print(e, flush=True)
            open(os.path.join(flags, "refused"), "w").close()
            sys.exit(2)
        for k in keys:
            s.add(k, [dict(G=int(k.split("-")[0][1:]), D=int(k.split("-")[1][1:]))])
        t0 = time.time()  # hold the lock until the other process was refused
        while not os.path.exists(os.path.join(flags, "refused")) and time.time() < t0 + 60:
            time.sleep(0.01)
        s.close()
    """)
    flags = tmp_path / "flags"
    flags.mkdir()
    folder = tmp_path / "out"
    procs = [subprocess.Popen([sys.executable, "-c", script, str(folder), str(flags)],
                              stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [(p.wait(timeout=60), p.stdout.read(), p.pid) for p in procs]
    assert sorted(rc for rc, _, _ in outs) == [0, 2]
    winner = next(pid for rc, _, pid in outs if rc == 0)
    loser_msg = next(out for rc, out, _ in outs if rc == 2)
    assert f"PID {winner} " in loser_msg
    lines = [json.loads(x) for x in (folder / "records.jsonl").read_text().splitlines()]
    assert sorted(x["_done"] for x in lines if "_done" in x) == sorted(KEYS)


def test_stale_lock_of_killed_run_taken_over(tmp_path):
    script = textwrap.dedent(f"""
        import importlib.util, os, signal, sys
        spec = importlib.util.spec_from_file_location("st", {S.__file__!r})
        st = sys.modules['st'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(st)
        s = st.SweepStore(sys.argv[1], {{"model": "m"}})
        s.add("G256-D1", [{{"G": 256, "D": 1}}])
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    p = subprocess.run([sys.executable, "-c", script, str(tmp_path)], timeout=60)
    assert p.returncode == -signal.SIGKILL
    pid_left = int((tmp_path / ".lock").read_text())
    s = SweepStore(str(tmp_path), {"model": "m"})
    assert s.notes == [f"took over the lock of PID {pid_left}, which ended without releasing it"]
    assert s.done == {"G256-D1"}
    s.close()
    assert (tmp_path / ".lock").read_text() == ""  # a clean close leaves no PID behind


# ------------------------------------------------------------------- corruption, exact counts
def test_clean_reopen_reuses_everything(full):
    folder, _ = full
    s = open_store(folder)
    assert sorted(s.done) == sorted(KEYS) and not s.report and s.notes == []
    s.close()


def test_duplicated_record_line(full):
    folder, lines = full
    lines.insert(1, lines[1])
    write_lines(folder, lines)
    s = open_store(folder)
    s.close()
    assert s.report.count("duplicate_line") == 1 and s.report.lines_dropped() == 1
    assert s.report.lines() == ["records.jsonl: 1 duplicated record line(s) (one copy of each "
                                f"kept), 1 line(s) dropped: {KEYS[0]}"]
    assert s.report.again == []
    assert_same_as_reference(folder)


def test_duplicated_grid_point_block(full):
    folder, lines = full
    write_lines(folder, lines + lines[4:8])
    s = open_store(folder)
    s.close()
    assert [e[:3] for e in s.report.events] == [("duplicate_point", KEYS[1], 4)]
    assert s.report.again == [] and len(s.records) == 3 * len(KEYS)
    assert_same_as_reference(folder)


def test_deleted_done_marker(full):
    folder, lines = full
    del lines[7]  # the marker of KEYS[1]
    write_lines(folder, lines)
    s = open_store(folder)
    s.close()
    assert [e[:3] for e in s.report.events] == [("orphan", KEYS[1], 3)]
    assert s.report.again == [KEYS[1]]
    assert KEYS[1] not in s.done and len(s.records) == 3 * (len(KEYS) - 1)
    assert s.report.lines()[-1] == ("records.jsonl: 1 grid point(s) lost their records and are "
                                    f"evaluated again: {KEYS[1]}")
    finish(folder)
    assert_same_as_reference(folder)


def test_rekeyed_done_marker(full):
    folder, lines = full
    m = json.loads(lines[7])
    m["_done"] = KEYS[4]  # another grid point's key, checksum left as it was
    lines[7] = json.dumps(m)
    write_lines(folder, lines)
    s = open_store(folder)
    s.close()
    assert [e[:3] for e in s.report.events] == [("bad_marker", KEYS[4], 1),
                                                ("orphan", KEYS[1], 3)]
    assert s.report.again == [KEYS[1]]
    finish(folder)
    assert_same_as_reference(folder)


def test_rekeyed_and_resealed_block_fails_key_check(full):
    """A whole block moved under another key with every checksum recomputed (what a buggy writer
    would produce) passes the checksums, but its records describe another grid point."""
    folder, lines = full
    recs = [json.loads(x) for x in lines[4:7]]
    for r in recs:
        r["grid_key"] = "G512-D9"
    blob, _ = block_and_sums("G512-D9", [{k: v for k, v in r.items() if k != "_sum"}
                                            for r in recs], json.loads(lines[7])["_fp"])
    write_lines(folder, lines + blob.decode().splitlines())
    keys = KEYS + ["G512-D9"]
    s = SweepStore(str(folder), META, keys=keys, check_record=matches_key)
    s.close()
    assert [e[:3] for e in s.report.events] == [("bad_point", "G512-D9", 4)]
    assert "record describes G256-D2, filed under G512-D9" in s.report.events[0][3]
    assert s.report.again == ["G512-D9"]


def test_value_edited_into_another_valid_number(full):
    folder, lines = full
    r = json.loads(lines[5])
    old = r["makespan_us"]
    r["makespan_us"] = old + 1.0  # still finite and positive: only the checksum sees it
    lines[5] = json.dumps(r, sort_keys=True)
    write_lines(folder, lines)
    s = open_store(folder)
    s.close()
    assert [e[:3] for e in s.report.events] == [("bad_point", KEYS[1], 4)]
    assert "record 2 of 3 fails its checksum" in s.report.events[0][3]
    assert s.report.again == [KEYS[1]]
    finish(folder)
    assert_same_as_reference(folder)


def test_record_filed_under_another_key(full):
    folder, lines = full
    r = json.loads(lines[5])
    r["grid_key"] = KEYS[3]
    lines[5] = json.dumps(r, sort_keys=True)
    write_lines(folder, lines)
    s = open_store(folder)
    s.close()
    ev = [e[:3] for e in s.report.events]
    assert ev == [("orphan", KEYS[3], 1), ("bad_point", KEYS[1], 3)]
    assert s.report.again == [KEYS[1]]  # KEYS[3] keeps its own verified block
    finish(folder)
    assert_same_as_reference(folder)


def test_final_newline_cut_after_done_marker(full):
    """The cut newline is restored, so the next record does not land on the marker's line (which
    used to cost two finished grid points on a later resume)."""
    folder, lines = full
    write_lines(folder, lines[:-4], newline=False)
    s = open_store(folder)
    assert [e[:3] for e in s.report.events] == [("newline", "", 0)]
    assert s.report.again == [] and len(s.done) == len(KEYS) - 1
    s.add(KEYS[-1], score(KEYS[-1]))
    s.close()
    assert_same_as_reference(folder)


def test_torn_last_line_counted_once(full):
    folder, lines = full
    text = "\n".join(lines[:-4]) + "\n" + lines[-4][: len(lines[-4]) // 2]
    (folder / "records.jsonl").write_text(text)
    s = open_store(folder)
    s.close()
    assert [e[:3] for e in s.report.events] == [("torn", "", 1)]
    assert s.report.lines() == ["records.jsonl: 1 torn last line (a write cut short), "
                                "1 line(s) dropped"]
    assert s.report.again == []  # the torn grid point never finished: nothing lost
    finish(folder)
    assert_same_as_reference(folder)


def test_unfinished_block_at_end(full):
    """A kill between a block's record lines and its marker: the records are dropped (once) and
    the grid point is evaluated again."""
    folder, lines = full
    write_lines(folder, lines[:-1])
    s = open_store(folder)
    s.close()
    assert [e[:3] for e in s.report.events] == [("orphan", KEYS[-1], 3)]
    assert s.report.again == [KEYS[-1]]
    finish(folder)
    assert_same_as_reference(folder)


def test_garbage_lines_and_invalid_values(tmp_path):
    """Unreadable lines between blocks cost nothing; a block whose checksums agree but whose
    values are impossible (a negative makespan, as a buggy scorer would store) is dropped."""
    s = open_store(tmp_path)
    for k in KEYS:
        recs = score(k)
        if k == KEYS[2]:
            recs[1]["makespan_us"] = -5.0
        s.add(k, recs)
    s.close()
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    lines.insert(4, "[1, 2]")
    lines.insert(4, "\x00\x00garbage")
    write_lines(tmp_path, lines)
    s = open_store(tmp_path)
    s.close()
    kinds = [e[:3] for e in s.report.events]
    assert kinds == [("unreadable", "", 1), ("unreadable", "", 1), ("bad_point", KEYS[2], 4)]
    assert "makespan_us = -5.0 is not a finite positive number" in s.report.events[2][3]
    assert s.report.lines()[0] == "records.jsonl: 2 unreadable line(s) (not a JSON object), " \
        "2 line(s) dropped"
    assert s.report.again == [KEYS[2]]
    finish(tmp_path)
    assert_same_as_reference(tmp_path)


def test_records_of_older_format_are_recomputed(full):
    folder, lines = full
    old = []
    for x in lines[:4]:
        o = json.loads(x)
        o = {"_done": o["_done"]} if "_done" in o else {k: v for k, v in o.items() if k != "_sum"}
        old.append(json.dumps(o))
    write_lines(folder, old + lines[4:])
    s = open_store(folder)
    s.close()
    assert [e[:3] for e in s.report.events] == [("legacy", KEYS[0], 4)]
    assert s.report.again == [KEYS[0]]
    finish(folder)
    assert_same_as_reference(folder)


def test_sweep_of_older_format_is_upgraded_not_recomputed(full):
    """A folder written before checksums (manifest without "format", records and markers
    without sums) of the same sweep: its manifest vouches for the records, which are kept and
    rewritten with checksums; nothing is evaluated again."""
    folder, lines = full
    man = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({"fingerprint": man["fingerprint"],
                                                      "meta": man["meta"]}))
    old = []
    for x in lines:
        o = json.loads(x)
        old.append(json.dumps({"_done": o["_done"]} if "_done" in o else
                              {k: v for k, v in o.items() if k != "_sum"}))
    write_lines(folder, old)
    s = open_store(folder)
    s.close()
    assert [e[:3] for e in s.report.events] == [("upgraded", k, 0) for k in KEYS]
    assert s.report.again == [] and s.report.lines_dropped() == 0
    assert (folder / "records.jsonl").read_text().splitlines() == lines
    assert json.loads((folder / "manifest.json").read_text())["format"] == S.FORMAT
    assert_same_as_reference(folder)


# ------------------------------------------------------------------------------ the manifest
@pytest.mark.parametrize("damage", ["delete", "garbage", "not-an-object"])
def test_manifest_rebuilt_from_records_and_options(full, damage):
    folder, _ = full
    man = folder / "manifest.json"
    if damage == "delete":
        man.unlink()
    else:
        man.write_text("{trunc" if damage == "garbage" else "[]")
    s = open_store(folder, resume=True)
    s.close()
    assert sorted(s.done) == sorted(KEYS) and not s.report
    assert len(s.notes) == 1 and "rebuilt from this command's options" in s.notes[0]
    assert f"the {len(KEYS)} finished grid point(s)" in s.notes[0]
    assert json.loads(man.read_text())["fingerprint"] == s.fp
    assert_same_as_reference(folder)


def test_manifest_missing_and_other_sweeps_records_refused(full):
    folder, _ = full
    (folder / "manifest.json").unlink()
    with pytest.raises(ValueError, match="another sweep: 6 finished grid point.*none of this "
                       "sweep.*--repair.*nothing is deleted.*--overwrite"):
        open_store(folder, {"model": "other"})
    assert len((folder / "records.jsonl").read_text().splitlines()) == 4 * len(KEYS)


def test_other_sweep_refused_names_only_what_differs(full):
    folder, _ = full
    meta = dict(META, batches=[256, 1024])
    with pytest.raises(ValueError) as e:
        open_store(folder, meta)
    msg = str(e.value)
    assert "differs in batches)" in msg and "parallelisms" not in msg
    assert "6 finished grid point(s) of another sweep" in msg and "none of this sweep" in msg
    assert "--overwrite" in msg
    (folder / "summary.json").write_text("{}")
    (folder / "records.csv").write_text("a\n")
    s = open_store(folder, meta, overwrite=True)
    assert s.done == set() and "deleted records.jsonl (6 finished grid point(s)" in s.notes[0]
    s.close()
    assert sorted(os.listdir(folder)) == [".lock", "manifest.json"]
    assert json.loads((folder / "manifest.json").read_text())["meta"]["batches"] == [256, 1024]


def test_resume_with_nothing_to_resume(tmp_path):
    with pytest.raises(ValueError, match="nothing to resume"):
        open_store(tmp_path / "empty", resume=True)
    with pytest.raises(ValueError, match="exclude each other"):
        open_store(tmp_path, resume=True, overwrite=True)


def test_unverifiable_records_without_manifest_refused_not_deleted(tmp_path):
    (tmp_path / "records.jsonl").write_text('{"x": 1}\n')
    with pytest.raises(ValueError, match="1 line.*no finished grid point.*--overwrite"):
        open_store(tmp_path)
    assert (tmp_path / "records.jsonl").read_text() == '{"x": 1}\n'


# ------------------------------------------------------------------------- disk and folder
def test_disk_full_names_file_keeps_records_and_leaves_no_tmp(full, monkeypatch):
    folder, lines = full
    write_lines(folder, lines[:-4])
    s = open_store(folder)

    def full_disk(op, path, args):
        if op == "write":
            os.write(args[0], args[1][:10])  # part of the block reaches the disk first
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(safeio, "_FAULT_HOOK", full_disk)
    with pytest.raises(OSError) as e:
        s.add(KEYS[-1], score(KEYS[-1]))
    assert e.value.filename == str(folder / "records.jsonl")
    assert "No space left on device" in str(e.value) and "5 finished grid point(s) are kept" \
        in str(e.value)
    with pytest.raises(OSError, match="No space"):
        S.atomic_write(str(folder / "summary.json"), "{}")
    monkeypatch.setattr(safeio, "_FAULT_HOOK", None)
    s.close()
    assert not [f for f in os.listdir(folder) if f.endswith(".tmp")]
    assert (folder / "records.jsonl").read_text() == "\n".join(lines[:-4]) + "\n"
    finish(folder)
    assert_same_as_reference(folder)


def test_read_only_folder_reads_finished_sweep(full, monkeypatch):
    folder, _ = full
    before = {f: (folder / f).read_bytes() for f in os.listdir(folder)}

    def read_only(op, path, args):
        if op in ("open", "write", "replace", "unlink", "truncate"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(safeio, "_FAULT_HOOK", read_only)
    s = open_store(folder)
    assert s.read_only and sorted(s.done) == sorted(KEYS) and not s.report
    with pytest.raises(ValueError, match="read-only"):
        s.add(KEYS[0], score(KEYS[0]))
    s.close()
    assert {f: (folder / f).read_bytes() for f in os.listdir(folder)} == before


# ------------------------------------------------------------------ fault injection (kill -9)
# A child process runs a whole sweep through the store (opening it: lock, leftover clean-up,
# repair rewrite, manifest; then one append per grid point) with a hook that counts the store's
# write / fsync / rename / truncate / unlink calls and SIGKILLs itself at the n-th one; at a write
# it first writes half of the bytes (a torn write). For every n the next run finishes the sweep,
# and its records must equal an uninterrupted run's. The child loads store.py by path (with
# safeio and recordscan, no JAX).
CHILD = textwrap.dedent("""
    import importlib.util, json, os, signal, sys
    spec = importlib.util.spec_from_file_location("st", sys.argv[1])
    st = sys.modules['st'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(st)
    folder, kill_at = sys.argv[2], int(sys.argv[3])
    keys, meta = json.loads(sys.argv[4]), json.loads(sys.argv[5])
    calls = 0

    def hook(op, path, args):
        global calls
        if op not in ("write", "fsync", "fsync_dir", "replace", "truncate", "unlink"):
            return
        calls += 1
        if calls == kill_at:
            if op == "write":
                os.write(args[0], args[1][: len(args[1]) // 2])
            os.kill(os.getpid(), signal.SIGKILL)

    def score(key):
        g, d = (int(x[1:]) for x in key.split("-"))
        return [{"G": g, "D": d, "i": i, "makespan_us": 1000.0 + 7.5 * g / (d + i)}
                for i in range(3)]

    st.set_fault_hook(hook)
    s = st.SweepStore(folder, meta, keys=keys)
    for k in keys:
        if k not in s.done:
            s.add(k, score(k))
    s.close()
    print(calls)
""")


def _child(folder, kill_at: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, S.__file__, str(folder), str(kill_at),
                           json.dumps(KEYS), json.dumps(META)],
                          capture_output=True, text=True, timeout=60)


def _prepare(folder, state: str) -> None:
    folder.mkdir()
    if state == "damaged":
        s = S.SweepStore(str(folder), META, keys=KEYS)
        for k in KEYS[:2]:
            s.add(k, score(k))
        s.close()
        with open(folder / "records.jsonl", "a") as fh:
            fh.write('{"G": 512, "D"')
        (folder / "manifest.json.tmp").write_text("{")


@pytest.mark.parametrize("state", ["empty", "damaged"])
def test_kill_at_every_store_syscall_loses_and_duplicates_nothing(tmp_path, state):
    """Starting states: an empty folder; finished grid points + a torn last line + a leftover
    .tmp (opening rewrites the file)."""
    probe = tmp_path / "probe"
    _prepare(probe, state)
    p = _child(probe, 0)
    assert p.returncode == 0, p.stderr
    n_calls = int(p.stdout.split()[-1])
    # empty: lock (truncate, write PID, fsync) 3 + unlink of the write probe 1 + manifest
    # (write, fsync, rename, fsync folder) 4 + 6 appends (write, fsync) 12 + fsync of the
    # folder for the new records.jsonl 1 = 21; damaged: lock 3 + write probe 1 + unlink the
    # .tmp 1 + repair rewrite 4 (the manifest is unchanged) + 4 appends 8 = 17
    assert n_calls == {"empty": 21, "damaged": 17}[state]
    lost = duplicated = 0
    for n in range(1, n_calls + 1):
        folder = tmp_path / f"{state}-{n}"
        _prepare(folder, state)
        p = _child(folder, n)
        assert p.returncode == -signal.SIGKILL, (n, p.stderr)
        s = finish(folder)
        got = [(r["grid_key"], r["i"]) for r in s.records]
        lost += len(set((k, i) for k in KEYS for i in range(3)) - set(got))
        duplicated += len(got) - len(set(got))
        assert_same_as_reference(folder)
    assert (lost, duplicated) == (0, 0)


# ------------------------------------------ refusals that never cost finished work (issue 29)
def _foreign_manifest(folder, meta) -> None:
    """Replace the folder's manifest.json by another sweep's (as a copied-in file)."""
    meta = json.loads(json.dumps(meta, sort_keys=True))
    (folder / "manifest.json").write_text(json.dumps(
        {"format": S.FORMAT, "fingerprint": S.grid_fingerprint(meta), "meta": meta}))


def _other_block(key: str, meta: dict) -> str:
    """One finished grid point of another sweep, as that sweep's own store wrote it (its
    marker carries that sweep's fingerprint)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        with SweepStore(d, meta) as other:
            other.add(key, score(key))
        with open(os.path.join(d, "records.jsonl")) as fh:
            return fh.read()


OTHER = {"model": "other", "batches": [1]}


def test_foreign_manifest_refusal_keeps_this_sweeps_points_and_repair_rebuilds(full):
    """This sweep's 6 finished points beside another sweep's manifest.json: the refusal says
    they are this sweep's, offers --repair (never --overwrite); --repair keeps all 6, keeps the
    foreign manifest aside and computes nothing again."""
    folder, lines = full
    _foreign_manifest(folder, OTHER)
    before = (folder / "records.jsonl").read_text()
    with pytest.raises(ValueError) as e:
        open_store(folder)
    msg = str(e.value)
    assert "holds 6 finished grid point(s) of this sweep" in msg
    assert "manifest.json of another sweep (model 'other'" in msg
    assert "--repair" in msg and "nothing is deleted" in msg and "--overwrite" not in msg
    assert (folder / "records.jsonl").read_text() == before  # the refusal wrote nothing
    s = open_store(folder, repair=True)
    s.close()
    assert sorted(s.done) == sorted(KEYS) and len(s.records) == 3 * len(KEYS)
    assert any("kept the 6 finished grid point(s) of this sweep" in n for n in s.notes)
    aside = [f for f in os.listdir(folder) if f.startswith("manifest.") and f != "manifest.json"]
    assert len(aside) == 1 and json.loads((folder / aside[0]).read_text())["meta"] == OTHER
    assert_same_as_reference(folder)


def test_appended_foreign_records_set_aside_by_repair(full):
    """Another sweep's 2 points appended to this sweep's records: the refusal counts both
    kinds by fingerprint; --repair moves the 2 to records.<fp>.jsonl (byte-exact blocks, once
    each even when repaired twice) and keeps the 6."""
    folder, _ = full
    extra = _other_block("G256-D1", OTHER) + _other_block("G512-D2", OTHER)
    with open(folder / "records.jsonl", "a") as fh:
        fh.write(extra)
    with pytest.raises(ValueError) as e:
        open_store(folder)
    msg = str(e.value)
    assert "holds 6 finished grid point(s) of this sweep" in msg
    assert "2 finished grid point(s) of another sweep (fingerprint" in msg
    assert "--repair" in msg and "--overwrite" not in msg
    s = open_store(folder, repair=True)
    s.close()
    side = [f for f in os.listdir(folder) if f.startswith("records.") and f.endswith(".jsonl")
            and f != "records.jsonl"]
    assert len(side) == 1 and (folder / side[0]).read_text() == extra
    assert sorted(s.done) == sorted(KEYS)
    assert_same_as_reference(folder)
    # the same foreign points appended again and repaired again: the side file holds them once
    with open(folder / "records.jsonl", "a") as fh:
        fh.write(extra)
    open_store(folder, repair=True).close()
    assert (folder / side[0]).read_text() == extra
    assert_same_as_reference(folder)


def test_repair_killed_midway_then_repeated_loses_nothing(full, monkeypatch):
    """A repair stopped after the side file and before records.jsonl is rewritten: the same
    repair again finishes it; every record of both sweeps is still in the folder."""
    folder, _ = full
    extra = _other_block("G256-D1", OTHER)
    with open(folder / "records.jsonl", "a") as fh:
        fh.write(extra)

    def stop_at_records(op, path, args):
        if op == "replace" and path.endswith("/records.jsonl"):
            raise KeyboardInterrupt  # as a kill between the two atomic replacements
    monkeypatch.setattr(safeio, "_FAULT_HOOK", stop_at_records)
    with pytest.raises(KeyboardInterrupt):
        open_store(folder, repair=True)
    monkeypatch.setattr(safeio, "_FAULT_HOOK", None)
    assert extra in (folder / "records.jsonl").read_text()  # nothing lost yet
    open_store(folder, repair=True).close()
    side = [f for f in os.listdir(folder) if f.startswith("records.") and f != "records.jsonl"]
    assert [(folder / f).read_text() for f in side] == [extra]
    assert_same_as_reference(folder)


def test_repair_and_overwrite_exclude_each_other(tmp_path):
    with pytest.raises(ValueError, match="repair and overwrite exclude each other"):
        open_store(tmp_path, repair=True, overwrite=True)


def test_directory_without_write_permission_detected_at_open(full, monkeypatch):
    """``chmod a-w DIR`` as the store meets it: the existing .lock and records.jsonl stay
    writable, no new file can be created. The store is read-only from the start (before any
    grid point), naming why; a finished sweep is still read in full."""
    folder, _ = full

    def no_new_files(op, path, args):
        if op == "open" and not os.path.exists(path):
            raise OSError(errno.EACCES, "Permission denied", path)
    monkeypatch.setattr(safeio, "_FAULT_HOOK", no_new_files)
    s = open_store(folder)
    assert s.read_only and "no new file can be created" in s.read_only_why
    assert sorted(s.done) == sorted(KEYS)
    with pytest.raises(ValueError, match="is read-only .*cannot store grid point"):
        s.add("G256-D1", score("G256-D1"))
    s.close()
    assert not (folder / S.PROBE_NAME).exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_chmod_read_only_directory_detected_at_open(full):
    folder, _ = full
    os.chmod(folder, 0o555)
    try:
        s = open_store(folder)
        s.close()
        assert s.read_only and sorted(s.done) == sorted(KEYS)
    finally:
        os.chmod(folder, 0o755)


def test_repair_brings_back_this_sweeps_points_set_aside_earlier(full):
    """Issue 41 item 5: sweep A (6 points), then sweep B with --repair (A's 6 set aside in
    records.<fpA>.jsonl, B's 6 computed), then A again with --repair: all 6 of A come back and
    none is computed again (before, A recomputed every point); B's are set aside in turn and
    come back the same way. Nothing is lost or duplicated: each reopening equals the reference."""
    folder, _ = full
    b_meta = {"model": "b", "batches": [256, 512]}
    s = open_store(folder, b_meta, repair=True)
    assert s.done == set()
    for k in KEYS:
        s.add(k, score(k))
    s.close()
    side_a = [f for f in os.listdir(folder) if f.startswith("records.") and f != "records.jsonl"]
    assert side_a == [f"records.{grid_fingerprint(normalise(META))}.jsonl"]
    s = open_store(folder, repair=True)  # sweep A again
    s.close()
    assert sorted(s.done) == sorted(KEYS) and len(s.records) == 3 * len(KEYS)
    assert any(n.startswith("brought back 6 finished grid point(s) of this sweep from "
                            f"{side_a[0]}") for n in s.notes)
    assert not (folder / side_a[0]).exists()  # all of it is in records.jsonl again
    assert_same_as_reference(folder)
    s = open_store(folder, b_meta, repair=True)  # and B's come back too
    s.close()
    assert sorted(s.done) == sorted(KEYS) and len(s.records) == 3 * len(KEYS)
