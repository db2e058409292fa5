"""The seeded resiliency bugs: each a small patch to the trainer of the kind such stacks have had, the
catalogue's scenarios that should catch it, and the explore base that searches for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BASES = Path(__file__).resolve().parent / "bases"


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str
    file: str
    """The patched file, relative to the project root."""
    old: str
    """Text the file holds exactly once..."""
    new: str
    """...and what it becomes."""
    scenarios: tuple[str, ...]
    """The catalogue's scenarios meant to catch a bug of this kind."""
    base: str
    """The explore base (benchmarks/mutants/bases/) whose settings reach the bug."""

    def base_file(self) -> Path:
        return BASES / f"{self.base}.yaml"

    def apply(self, root: Path) -> None:
        """Plant the bug in the project copy at `root`."""
        path = root / self.file
        text = path.read_text()
        if text.count(self.old) != 1:
            raise ValueError(f"mutant {self.name}: {self.file} holds its text {text.count(self.old)} times, not once")
        path.write_text(text.replace(self.old, self.new))


MUTANTS = (
    Mutant("resume_late", "resume one iteration late (the persistent load returns its iteration + 1)", "trainer/checkpoint.py",
           "time.monotonic() - t0))\n        return iteration\n", "time.monotonic() - t0))\n        return iteration + 1\n",
           ("rank_killed",), "mutant_sync"),
    Mutant("resume_early", "resume one iteration early (the persistent load returns its iteration - 1)", "trainer/checkpoint.py",
           "time.monotonic() - t0))\n        return iteration\n", "time.monotonic() - t0))\n        return iteration - 1\n",
           ("rank_killed",), "mutant_sync"),
    Mutant("data_position_not_saved", "the data position is not saved (a resume reads the first batches again)",
           "trainer/loop.py", '"data": self.sampler.state_dict(),', '"data": {"consumed_samples": 0},',
           ("rank_killed",), "mutant_sync"),
    Mutant("rng_not_restored", "the RNG state is saved but not restored at a resume", "trainer/loop.py",
           '        set_rng_state(state["rng"])\n        for c in self.components:', "        for c in self.components:",
           ("rank_killed",), "mutant_sync"),
    Mutant("schedule_not_restored", "the LR schedule's step count is not restored (warm-up again)", "trainer/loop.py",
           '        self.schedule.load_state_dict(state["schedule"])\n', "",
           ("rank_killed",), "mutant_sync"),
    Mutant("visible_before_written", "a checkpoint is renamed into place before its manifest (its last file) is written",
           "trainer/checkpoint.py",
           "        write_manifest(tmp, iteration, self.world_size)\n        shutil.rmtree(final, ignore_errors=True)\n"
           "        os.rename(tmp, final)\n",
           "        shutil.rmtree(final, ignore_errors=True)\n        os.rename(tmp, final)\n"
           "        write_manifest(final, iteration, self.world_size)\n",
           ("fault_during_checkpoint", "fault_during_checkpoint_async", "checkpoint_corrupt"), "mutant_async"),
    Mutant("async_finalize_skipped_on_exit", "the async save in flight at exit is never finalized (sealed)",
           "trainer/checkpoint.py", "    def close(self) -> None:\n        self.wait()",
           "    def close(self) -> None:\n        self._pending = None",
           ("fault_during_checkpoint_async", "sigterm_async_save"), "mutant_async"),
    Mutant("save_without_waiting", "a save (the SIGTERM handler's among them) starts without waiting for the async save "
           "in flight, which is then never sealed", "trainer/checkpoint.py",
           "        assert self.root is not None\n        self.wait()\n", "        assert self.root is not None\n",
           ("fault_during_checkpoint_async", "async_save_every_step"), "mutant_async"),
    Mutant("nan_check_skipped_on_one_rank", "rank 1 reports its loss to the rerun state machine as finite whatever it is",
           "trainer/resiliency/rerun_step.py", "m.record(loss.item())", "m.record(0.0 if self.env.rank == 1 else loss.item())",
           ("nan_transient", "nan_persistent"), "mutant_sync"),
    Mutant("ft_timeouts_not_persisted", "the learned FT timeouts are not written to ft_state.json", "trainer/resiliency/ft.py",
           "if self.events.rank == 0 and self.state_file is not None:", "if self.events.rank == 0 and self.state_file is None:",
           ("ft_timeouts_learned", "ft_timeouts_learned_relaunch"), "mutant_sync"),
    Mutant("local_preferred_when_older", "an NVRx local checkpoint is resumed from even when the persistent one is newer",
           "trainer/checkpoint.py", "if local_latest >= 0 and local_latest >= (choice[0] or (-1,))[0]:", "if local_latest >= 0:",
           ("local_checkpoint_killed", "local_checkpoint_lost", "local_checkpoint_save_killed"), "mutant_sync"),
    Mutant("hashes_not_verified", "a checkpoint's files are checked by size only, not by hash, on load", "trainer/checkpoint.py",
           "reason = verify(folder, self.cfg.verify_on_load)", "reason = verify(folder, False)",
           ("checkpoint_corrupt", "checkpoint_garbled_w1"), "mutant_sync"),
    Mutant("retention_keeps_one_fewer", "retention keeps k - 1 checkpoints (with k 1, the one just sealed is pruned)",
           "trainer/checkpoint.py", "for folder in kept[self.cfg.most_recent_k :]:", "for folder in kept[self.cfg.most_recent_k - 1 :]:",
           ("retention_k1_save_killed", "retention_k2_corrupt_newest"), "mutant_retention"),
    Mutant("retention_room_before_save", "retention makes room first: a save prunes to k - 1 before it writes, so a save "
           "that fails or is killed leaves one checkpoint fewer (none with k 1)", "trainer/checkpoint.py",
           "        final = iteration_dir(self.root, iteration)\n        tmp = final.with_name",
           "        if self.rank == 0 and self.cfg.most_recent_k > 0:\n"
           "            for _, old in list_checkpoints(self.root)[self.cfg.most_recent_k - 1 :]:\n"
           "                shutil.rmtree(old, ignore_errors=True)\n"
           "        final = iteration_dir(self.root, iteration)\n        tmp = final.with_name",
           ("retention_k1_save_killed", "retention_k2_disk_full"), "mutant_retention"),
    Mutant("retention_counts_rejected", "retention counts a newer checkpoint a load rejected as one of the k (the trainer's "
           "bug before 2026-12-06)", "trainer/checkpoint.py",
           "kept = [folder for iteration, folder in list_checkpoints(self.root) if iteration <= sealed]",
           "kept = [folder for _, folder in list_checkpoints(self.root)]",
           ("retention_k1_corrupt_then_killed",), "mutant_retention"),
    Mutant("verify_off_skips_sizes", "checkpoint.verify_on_load false skips the size check too, not only the hashes",
           "trainer/checkpoint.py", "reason = verify(folder, self.cfg.verify_on_load)",
           "reason = verify(folder) if self.cfg.verify_on_load else None",
           ("checkpoint_truncated_verify_off",), "mutant_sync"),
    Mutant("local_atomic_writes_a_share", "local checkpoints with algo atomic write only the share fully_parallel would "
           "(and read back only their own)", "trainer/local_checkpoint.py",
           '        if self.cfg.non_persistent_local_ckpt_algo == "atomic":\n            return dict(tensors), common\n', "",
           ("local_checkpoint_atomic_killed",), "mutant_sync"),
    Mutant("workers_ignore_resume", "the data-loader workers start from the first batch, not the resumed position "
           "(dataset.num_workers > 0)", "trainer/data.py", "sampler=_From(self.index)", "sampler=_From(0)",
           ("dataloader_sigterm",), "mutant_retention"),
)
