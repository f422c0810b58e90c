"""`--resume`: a run's checkpoint in its output folder, saved as it measures and read back to measure the rest.

`results_partial.csv` holds the rows so far: the run's whole lengths from its start (`run.kept_groups`), each row as
the sitting that measured it left it. `run_partial.json` holds the run's settings, the machine it began on, its peer
comparisons so far and its sittings: each one's command, start, machine line (with the load when it began and at its
last save), matmul peak, and how many rows and peer comparisons it found saved when it began (so each row is known to
be of the sitting that measured it). The JSON is written before the CSV at each save: rows never lack their settings.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict

from linformer_hf.outputs import held, write_json_atomic

from .config import BenchmarkConfig
from .report import cpu_description, load_average
from .results import BenchmarkRow, read_csv, write_csv
from .run import Measured, PeerResult, RunInfo, kept_groups, kept_peers, planned_groups

PARTIAL_CSV = "results_partial.csv"
PARTIAL_JSON = "run_partial.json"
COMPLETE = "complete"  # `read_checkpoint` of a finished run


def settings(cfg: BenchmarkConfig) -> dict:
    """The run's settings as its record holds them (JSON's types: a list, not a tuple)."""
    return json.loads(json.dumps(asdict(cfg)))


def machine_identity(cpu: dict) -> dict:
    """What the machine of a resumed sitting must share with the run's first: the CPU, its number of logical CPUs
    (torch's default threads follow it), torch and transformers. (A GPU's name is checked once the matmul peak's
    process has read it: `Checkpoint.peak`.)"""
    import torch
    import transformers

    return {
        "cpu": cpu_description(cpu),
        "logical CPUs": os.cpu_count(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def _differences(recorded: dict, current: dict) -> list[str]:
    return [
        f"{key} {json.dumps(recorded[key])} there, {json.dumps(current.get(key))} here"
        for key in recorded
        if recorded[key] != current.get(key)
    ]


def _check_settings(out_dir: str, record: dict, cfg: BenchmarkConfig) -> None:
    differ = _differences(record.get("config") or {}, settings(cfg))
    if differ:
        raise RuntimeError(
            f"{out_dir} holds a run of other settings ({'; '.join(differ)}): resume it with its own (it was started "
            f"by `{record.get('command')}`), or give another --output_dir (--overwrite starts it again with these)."
        )


def read_checkpoint(out_dir: str, cfg: BenchmarkConfig, cpu: dict) -> tuple[dict, Measured] | str | None:
    """What `--resume` finds in `out_dir`: the record and what earlier sittings measured of a stopped run (checked to
    be this run: the same settings, machine and software); `COMPLETE` for a finished run of these settings; None for
    an absent or empty folder (the run starts). RuntimeError, naming the way out, for anything else."""
    names = set(os.listdir(out_dir)) if os.path.isdir(out_dir) else set()
    partial_csv, partial_json = os.path.join(out_dir, PARTIAL_CSV), os.path.join(out_dir, PARTIAL_JSON)
    again = "--overwrite starts the run again"
    if PARTIAL_JSON in names:
        try:
            with open(partial_json, encoding="utf-8") as handle:
                record = json.load(handle)
            peer = [PeerResult(**result) for result in record["peer"]]
            if not isinstance(record["sittings"], list) or not record["sittings"]:  # written with its first sitting
                raise ValueError("no sitting recorded")
        except (OSError, ValueError, KeyError, IndexError, TypeError) as err:
            raise RuntimeError(
                f"{partial_json} cannot be read ({err!r}): the run cannot be resumed; {again}."
            ) from None
        _check_settings(out_dir, record, cfg)
        differ = _differences(record.get("machine_identity") or {}, machine_identity(cpu))
        if differ:
            raise RuntimeError(
                f"{out_dir}'s run began on another machine or software ({'; '.join(differ)}): its rows would not "
                f"compare with this one's. Resume it where it began, or give another --output_dir ({again} here)."
            )
        rows: list[BenchmarkRow] = []
        if PARTIAL_CSV in names:
            try:
                rows = read_csv(partial_csv)
            except (OSError, ValueError, KeyError, TypeError) as err:
                raise RuntimeError(f"{partial_csv} cannot be read ({err}): {again}.") from None
        try:
            groups = kept_groups(cfg, rows)
        except ValueError as err:
            raise RuntimeError(f"{partial_csv} is not this run's: its {err}. {again}.") from None
        return record, Measured([row for group in groups for row in group], kept_peers(cfg, peer))
    if PARTIAL_CSV in names:
        raise RuntimeError(
            f"{out_dir} holds {PARTIAL_CSV} but no record of its settings ({PARTIAL_JSON}, which runs since --resume "
            f"write beside it): it cannot be resumed; {again}."
        )
    if {"results.csv", "run_info.json"} <= names:
        try:
            with open(os.path.join(out_dir, "run_info.json"), encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError) as err:
            raise RuntimeError(f"{out_dir}/run_info.json cannot be read ({err}): {again}.") from None
        _check_settings(out_dir, record, cfg)
        return COMPLETE
    if names:
        raise RuntimeError(
            f"{out_dir} holds no run to resume (it holds {held(out_dir)}): give the output folder of a stopped run, "
            "or another --output_dir."
        )
    return None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _labels(rows: list[BenchmarkRow]) -> list[str]:
    """The lengths the rows measured, in order: "inference n=512", "train n=512", "scaling n=4096"."""
    return list(dict.fromkeys(f"{row.mode.value} n={row.n}" for row in rows))


class Checkpoint:
    """A run's checkpoint in its output folder, for this sitting: saved after each length and peer comparison it
    measures (`save_rows`, `save_peer`, `peak`: `run_benchmark`'s callbacks), removed once the run's results are
    written (`remove`). `found`: what `read_checkpoint` found of a stopped run (None: a new run)."""

    def __init__(
        self,
        out_dir: str,
        cfg: BenchmarkConfig,
        command: str,
        machine: str,
        cpu: dict,
        found: tuple[dict, Measured] | None = None,
    ):
        self.out_dir, self.cfg, self.began = out_dir, cfg, time.time()
        self.csv_path, self.json_path = os.path.join(out_dir, PARTIAL_CSV), os.path.join(out_dir, PARTIAL_JSON)
        if found is None:
            self.record = {
                "command": command,
                "config": settings(cfg),
                "machine_identity": machine_identity(cpu),
                "sittings": [],
                "peer": [],
            }
            self.earlier = Measured()
        else:
            self.record, self.earlier = found
        self.rows, self.peer = list(self.earlier.rows), list(self.earlier.peer)
        self.sitting = {
            "started": _now(),
            "command": command,
            "machine": machine,  # the load as the sitting began
            "rows_before": len(self.rows),
            "peer_before": len(self.peer),
            "peak_info": None,
            "runtime_s": 0.0,
        }
        self.record["sittings"].append(self.sitting)  # written at its first save: a sitting stopped at once is none

    @property
    def resumed(self) -> bool:
        return len(self.record["sittings"]) > 1

    def reusable_peak(self) -> dict | None:
        """The matmul peak of the last sitting that measured one, where every row of the run is saved (what is left is
        peer comparisons, or nothing): no point needs this sitting's."""
        if len(self.rows) < sum(len(group) for group in planned_groups(self.cfg)):
            return None
        peaks = [s["peak_info"] for s in self.record["sittings"] if s.get("peak_info")]
        return peaks[-1] if peaks else None

    def peak(self, peak_info: dict) -> None:
        """The sitting's matmul peak, once measured: on CUDA, the GPU must be the one the run began on."""
        earlier = [s["peak_info"].get("device_name") for s in self.record["sittings"] if s.get("peak_info")]
        name = peak_info.get("device_name")
        if earlier and earlier[0] != name and self.sitting["peak_info"] is None:
            raise RuntimeError(
                f"{self.out_dir}'s run began on the GPU {earlier[0]}, this sitting runs on {name}: its rows would not "
                "compare with this one's. Resume it on that GPU, or give another --output_dir (--overwrite starts the "
                "run again here)."
            )
        self.sitting["peak_info"] = peak_info

    def save_rows(self, rows: list[BenchmarkRow]) -> None:
        self.rows = list(rows)
        self._save(rows=True)

    def save_peer(self, peer: list[PeerResult]) -> None:
        self.peer = list(peer)
        self._save(rows=False)

    def _save(self, rows: bool) -> None:
        self.sitting.update(
            runtime_s=round(time.time() - self.began, 1), last_save=_now(), load_at_last_save=load_average()
        )
        self.record["peer"] = [asdict(result) for result in self.peer]
        write_json_atomic(self.json_path, self.record)  # first: a saved row never lacks its settings
        if rows:
            write_csv(self.rows, self.csv_path)

    def saved(self) -> str | None:
        """What a stop keeps, in words (None: nothing)."""
        if os.path.exists(self.csv_path):
            return f"the points measured so far are in {self.csv_path}"
        if os.path.exists(self.json_path) and self.record["peer"]:
            return f"the peer comparisons measured so far are in {self.json_path}"
        return None

    def finish(self, rows: list[BenchmarkRow], info: RunInfo, load_after: str) -> tuple[str, str, list[dict]]:
        """The run's command (the one that started it), machine line and sittings, for its results: each sitting with
        the lengths and peer comparisons it measured, its machine line and load; those that measured nothing left out.
        `info.runtime_s` becomes the sittings' sum."""
        self.sitting.update(runtime_s=round(info.runtime_s, 1), ended=_now(), load_after=load_after)
        sittings = self.record["sittings"]
        bounds = [(min(s["rows_before"], len(rows)), min(s["peer_before"], len(info.peer))) for s in sittings]
        bounds.append((len(rows), len(info.peer)))
        measured = []
        for sitting, (row_start, peer_start), (row_end, peer_end) in zip(sittings, bounds, bounds[1:], strict=False):
            points = _labels(rows[row_start:row_end]) + [f"peer n={p.n}" for p in info.peer[peer_start:peer_end]]
            if points:
                measured.append({**sitting, "points": points})
        info.runtime_s = sum(sitting["runtime_s"] for sitting in measured)
        if len(measured) <= 1:
            machine = f"{(measured or [self.sitting])[0]['machine']}; after the run: {load_after}"
        else:
            machine = "; ".join(
                f"sitting {i} ({', '.join(s['points'])}), started {s['started']}"
                + (f", matmul peak {s['peak_info']['gflops']:.1f} GFLOP/s" if s.get("peak_info") else "")
                + f": {s['machine']}"
                for i, s in enumerate(measured, 1)
            )
            machine += f"; after the last: {load_after}"
        return self.record["command"], machine, measured

    def remove(self) -> None:
        """The run's results are written: its checkpoint is no longer needed."""
        for path in (self.csv_path, self.json_path):
            if os.path.exists(path):
                os.remove(path)
