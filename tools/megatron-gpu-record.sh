#!/bin/bash
# Record real Megatron-LM (megatron.training) and Megatron Bridge runs on a lent one-GPU machine, in
# one call, as CPU test data for the Megatron log adapter and `chaos correlate` (docs/gpu-results.md).
#
#   timeout 540 bash .gpu-stage/tools/megatron-gpu-record.sh      (from the checkout's root)
#
# Expects .whl/ (tools/megatron-wheels.sh) and .gpu-stage/{drivers,tools}/ (copies of this checkout's
# drivers/ and tools/). Every run gets its own folder, ports and hard timeout and runs in parallel with
# the others on the one GPU; each writes output.log (stdout and stderr as one stream, as a Slurm log
# has them), a checkpoint listing, latest_checkpointed_iteration.txt, ft_state.json and TensorBoard
# files. The runs end by about 470 s; then everything small is packed into $OUT/megatron-rec.tar.gz
# and the table is printed and written to $OUT/summary.txt.
set -uo pipefail
stage=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:?OUT must name the folder that comes back}
rec=/tmp/megatron-rec
rm -rf "$rec" && mkdir -p "$rec"
exec > >(tee -a "$rec/record.log") 2>&1
t_start=$(date +%s)
log() { echo "[record $(date +%T.%3N) +$(( $(date +%s) - t_start ))s] $*"; }

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false
MLM=$stage/drivers/megatron_lm.py
BR=$stage/drivers/megatron_bridge.py
REPRO=$stage/drivers/repro_distopt_load.py

log "machine: $(hostname) $(uname -r); $(nvidia-smi -L 2>&1 | head -2)"
bash "$stage/tools/megatron-gpu-setup.sh" /tmp/msite .whl || { log "setup failed"; exit 3; }
export PYTHONPATH=/tmp/msite PATH=/tmp/msite/bin:$PATH
python3 - <<'PY' | tee "$rec/versions.txt"
import importlib.metadata as md
import platform
print("python", platform.python_version())
for name in ("torch", "megatron-core", "megatron-bridge", "nvidia-resiliency-ext", "transformers", "pydantic",
             "omegaconf", "hydra-core", "tensorboard", "numpy", "pyarrow", "datasets", "nvidia-modelopt"):
    try:
        print(name, md.version(name))
    except md.PackageNotFoundError:
        print(name, "absent")
PY
python3 -c "import torch; print('cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'nccl', torch.cuda.nccl.version())" \
  | tee -a "$rec/versions.txt"

# The seed-2 correlation shape, spelled once for each framework. Everything that differs between the
# two frameworks' defaults is set on both sides (schedule, weight decay, Adam betas, fusions).
MLM_BASE=(--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512
  --micro-batch-size 4 --global-batch-size 32 --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-warmup-iters 1
  --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --adam-eps 1e-8 --clip-grad 1.0 --init-method-std 0.02
  --mock-data --tokenizer-type NullTokenizer --vocab-size 32000 --bf16 --seed 1234
  --transformer-impl local --no-gradient-accumulation-fusion --no-persist-layer-norm --no-masked-softmax-fusion
  --no-bias-gelu-fusion --no-bias-dropout-fusion --cross-entropy-loss-fusion --cross-entropy-fusion-impl native
  --accumulate-allreduce-grads-in-fp32 --log-interval 1 --eval-interval 5 --eval-iters 2)
BR_BASE=(model.num_layers=2 model.hidden_size=256 model.num_attention_heads=4 dataset.seq_length=512
  train.micro_batch_size=4 train.global_batch_size=32 optimizer.lr=3e-4 optimizer.min_lr=3e-5
  optimizer.weight_decay=0.1 scheduler.start_weight_decay=0.1 scheduler.end_weight_decay=0.1
  scheduler.lr_warmup_iters=1 tokenizer.vocab_size=32000 rng.seed=1234 dataset.random_seed=1234
  logger.log_interval=1 validation.eval_interval=5 validation.eval_iters=2)
FT_LAUNCH=(ft_launcher --standalone --nproc-per-node=1 --monitor-interval=1 --term-timeout=15
  --ft-workload-check-interval=1 --ft-gpu-memory-reclaim-timeout=0)

# rank_env PORT: the variables torchrun would give a single rank, for runs whose exit code and pid must
# be the rank's own (rerun exit codes 16/17, SIGTERM/SIGKILL sent to the rank).
rank_env() { echo env RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT="$1"; }

# job NAME LIMIT CMD...: run CMD in $rec/NAME under a hard timeout; optional SIGNAL_AT="REGEX SIG"
# sends SIG to the rank (the timeout's child) the first time REGEX appears in its log.
job() {
  local name=$1 limit=$2; shift 2
  local dir=$rec/$name t0 rc tpid
  [[ -e $rec/stop ]] && { log "not starting $name: the record is stopping"; return 99; }
  mkdir -p "$dir"
  printf '%q ' "$@" > "$dir/command.txt"
  t0=$(date +%s%N)
  log "start $name: $(cut -c1-400 "$dir/command.txt")"
  ( cd "$dir" && exec timeout -k 10 "$limit" "$@" ) > "$dir/output.log" 2>&1 &
  tpid=$!
  echo "$tpid" >> "$rec/groups"
  if [[ -n ${SIGNAL_AT:-} ]]; then
    local regex=${SIGNAL_AT% *} sig=${SIGNAL_AT##* } rank
    while kill -0 "$tpid" 2>/dev/null; do
      if grep -qE -- "$regex" "$dir/output.log"; then
        rank=$(pgrep -P "$tpid" | head -1)
        echo "$(date '+%F %T.%3N') sent SIG$sig to rank pid $rank after the log matched: $regex" >> "$dir/signals.txt"
        log "$name: matched '$regex': SIG$sig to $rank"
        kill "-$sig" "$rank"
        break
      fi
      sleep 0.2
    done
  fi
  wait "$tpid"; rc=$?
  local left
  left=$(pgrep -g "$tpid" | tr '\n' ' ')
  if [[ -n $left ]]; then
    echo "processes left in the run's group after it ended: $left" >> "$dir/signals.txt"
    ps -o pid,ppid,etimes,args -p "$(pgrep -d, -g "$tpid")" >> "$dir/signals.txt" 2>/dev/null
    kill -KILL -- "-$tpid" 2>/dev/null
  fi
  echo "$rc" > "$dir/rc"
  printf '%s\t%s\t%.1f\n' "$name" "$rc" "$(( $(date +%s%N) - t0 ))e-9" >> "$rec/summary.tsv"
  log "end $name rc=$rc"
  return "$rc"
}

# The two correlation runs and the diverging one (3a).
mlm_corr() {
  job mlm_corr 240 torchrun --standalone --nproc-per-node=1 "$MLM" "${MLM_BASE[@]}" --train-iters 10 \
    --use-distributed-optimizer --tensorboard-dir tb --save ckpt --save-interval 5
}
mlm_corr_lr6e4() {
  job mlm_corr_lr6e-4 240 torchrun --standalone --nproc-per-node=1 "$MLM" "${MLM_BASE[@]/3e-4/6e-4}" \
    --train-iters 10 --use-distributed-optimizer --tensorboard-dir tb --save ckpt --save-interval 5
}
bridge_corr() {
  job bridge_corr 300 torchrun --standalone --nproc-per-node=1 "$BR" "${BR_BASE[@]}" train.train_iters=10 \
    logger.tensorboard_dir="$rec/bridge_corr/tb" checkpoint.save="$rec/bridge_corr/ckpt" checkpoint.save_interval=5
}

# 3b: Megatron-LM under ft_launcher with FT sections and learned timeouts; Megatron-Core's fault
# injector fires 3 s after iteration 20 (checkpoints every 10), so the resumed attempt (from 20 or
# later) never re-arms it.
mlm_ft() {  # mlm_ft NAME FAULT
  job "$1" 330 "${FT_LAUNCH[@]}" --max-restarts=2 \
    --ft-rank-section-timeouts=setup:300,step:30,checkpointing:120 --ft-rank-out-of-section-timeout=30 \
    "$MLM" "${MLM_BASE[@]}" --train-iters 100 --save-interval 10 --eval-interval 50 --save ckpt --load ckpt \
    --enable-ft-package --calc-ft-timeouts --fault-injector-ranks 0 --fault-injector-fault-types "$2" \
    --fault-injector-fault-delay 3 --fault-injector-delay-start-iteration 20 --tensorboard-dir tb
}

# 3e: the rerun state machine with its error injector (rate 1: the first validated result, in
# iteration 2). Megatron names the node by os.uname()[1] and the GPU by torch.cuda.current_device().
# other_node.sh CMD...: run CMD as if on another node: in a new UTS namespace with another hostname
# (unshare, as root); where that is refused, by patching os.uname in the Python process, and it says so.
cat > "$rec/other_node.sh" <<'SH'
set_name='(hostname rerun-node-b || echo rerun-node-b > /proc/sys/kernel/hostname) 2>/dev/null'
if unshare --uts -- sh -c "$set_name && [ \"\$(uname -n)\" = rerun-node-b ]"; then
  echo "other_node.sh: new UTS namespace with hostname rerun-node-b (this machine: $(uname -n))"
  exec unshare --uts -- sh -c "$set_name && exec \"\$@\"" sh "$@"
fi
echo "other_node.sh: unshare --uts refused: emulating node rerun-node-b by patching os.uname in the process"
while [[ $1 != python3 ]]; do export "${1#env}" 2>/dev/null; shift; done
shift
exec python3 -c 'import os, runpy, sys
u = os.uname()
os.uname = lambda: os.uname_result((u.sysname, "rerun-node-b", u.release, u.version, u.machine))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")' "$@"
SH
RERUN=(--rerun-mode validate_results --error-injection-rate 1 --train-iters 10 --save ckpt --load ckpt --save-interval 100)
rerun_transient() {
  job rerun_transient 200 $(rank_env 41011) python3 "$MLM" "${MLM_BASE[@]}" "${RERUN[@]}" --error-injection-type transient_error
}
rerun_persistent() {
  local d=$rec/rerun_persistent
  mkdir -p "$d"
  job rerun_persistent/1_first 200 $(rank_env 41021) python3 "$MLM" "${MLM_BASE[@]}" "${RERUN[@]}" \
    --error-injection-type persistent_error --save "$d/ckpt" --load "$d/ckpt"
  job rerun_persistent/2_same_node 200 $(rank_env 41022) python3 "$MLM" "${MLM_BASE[@]}" "${RERUN[@]}" \
    --error-injection-type persistent_error --save "$d/ckpt" --load "$d/ckpt"
  job rerun_persistent/3_other_node 200 bash "$rec/other_node.sh" $(rank_env 41023) python3 "$MLM" "${MLM_BASE[@]}" "${RERUN[@]}" \
    --error-injection-type persistent_error --save "$d/ckpt" --load "$d/ckpt"
}

# 3c, Megatron-LM side: the same save-then-resume with and without the distributed optimizer, and
# the megatron.core-only reproduction.
mlm_resume() {  # mlm_resume NAME EXTRA...
  local name=$1 d=$rec/$1; shift
  mkdir -p "$d"
  job "$name/1_save" 200 $(rank_env "$MLM_PORT") python3 "$MLM" "${MLM_BASE[@]}" "$@" --train-iters 8 \
    --save-interval 4 --exit-interval 4 --save "$d/ckpt" --load "$d/ckpt"
  job "$name/2_resume" 200 $(rank_env "$((MLM_PORT + 1))") python3 "$MLM" "${MLM_BASE[@]}" "$@" --train-iters 8 \
    --save-interval 4 --save "$d/ckpt" --load "$d/ckpt"
}
repro() { job repro_distopt_load 150 torchrun --standalone --nproc-per-node=1 "$REPRO"; }

# 3c, Bridge side: FaultToleranceConfig(simulate_fault=True, rank_killed, rank 0) under ft_launcher, as
# the probe ran it (distributed optimizer, the recipe's default) and without the distributed
# optimizer. The simulated fault re-arms in every attempt (Bridge's example requires
# checkpoint_time < fault_delay < total_training_time), so its delay and the run's length come from
# the pace bridge_corr measured on this machine: setup S (initialized to iteration 1), step T, and
# the first save F. F is large: the first torch_dist save starts a multiprocessing Manager with the
# spawn method (megatron.core's get_write_results_queue), which re-imports the entry script and so all
# of megatron.bridge (37 s under this record's load on 2026-12-01). Every attempt pays S + F again.
# With N steps of ~20 s and ten checkpoints, the fault fires once ~60% of the steps are done; a
# resumed attempt (from the last checkpoint, ~50%) finishes before its own fault.
bridge_pace() {
  python3 - "$rec/bridge_corr/output.log" <<'PY'
import datetime, re, statistics, sys
text = open(sys.argv[1], errors="replace").read()
stamp = lambda s: datetime.datetime.strptime(s, "%Y-%m-%d %H:%M:%S")
init = re.search(r"\[after megatron is initialized\] datetime: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", text)
its = [(stamp(t), int(i), float(ms)) for t, i, ms in re.findall(
    r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] iteration +(\d+)/ *\d+ \|.*?per iteration \(ms\): ([\d.]+)", text)]
at = {i: t for t, i, _ in its}
setup = (its[0][0] - stamp(init.group(1))).total_seconds() if init and its else 12.0
step = statistics.median(ms for _, i, ms in its if i >= 3) / 1000 if len(its) >= 3 else 0.15
first_save = (at[6] - at[5]).total_seconds() if 5 in at and 6 in at else 40.0
iters = max(60, int(round(20 / max(step, 0.02) / 10)) * 10)  # about 20 s of steps
save_every = iters // 10
delay = setup + first_save + 0.6 * (iters * step + 10 * 1.0) + 5  # ~1 s per later save, 5 s margin
print(f"{setup:.0f} {step:.3f} {first_save:.0f} {iters} {save_every} {round(delay)}")  # the delay is an int field
PY
}
bridge_simfault() {  # bridge_simfault NAME MAX_RESTARTS EXTRA...
  local name=$1 restarts=$2; shift 2
  job "$name" 330 "${FT_LAUNCH[@]}" --max-restarts="$restarts" \
    --ft-rank-section-timeouts=setup:600,step:180,checkpointing:420 --ft-rank-out-of-section-timeout=300 \
    "$BR" "${BR_BASE[@]}" "train.train_iters=$ITERS" "validation.eval_interval=$ITERS" \
    checkpoint.save="$rec/$name/ckpt" checkpoint.load="$rec/$name/ckpt" "checkpoint.save_interval=$SAVE_EVERY" \
    logger.tensorboard_dir="$rec/$name/tb" \
    ft.enable_ft_package=true ft.simulate_fault=true ft.simulated_fault_type=rank_killed \
    ft.simulated_fault_rank=0 "ft.simulated_fault_base_delay=$DELAY" "$@"
}
bridge_simfault_both() {
  local waited=0
  while [[ ! -e $rec/bridge_corr/rc ]] && (( waited < 300 )); do sleep 1; waited=$((waited + 1)); done
  read -r SETUP STEP FIRST_SAVE ITERS SAVE_EVERY DELAY < <(bridge_pace)
  log "bridge pace: setup ${SETUP}s step ${STEP}s first save ${FIRST_SAVE}s -> train_iters $ITERS, save every $SAVE_EVERY, fault delay ${DELAY}s"
  echo "setup_s=$SETUP step_s=$STEP first_save_s=$FIRST_SAVE train_iters=$ITERS save_interval=$SAVE_EVERY fault_base_delay_s=$DELAY" \
    > "$rec/bridge_pace.txt"
  bridge_simfault bridge_simfault_distopt 1 &
  bridge_simfault bridge_simfault_nodistopt 3 optimizer.use_distributed_optimizer=false ddp.use_distributed_optimizer=false &
  wait
}

# 3d: Bridge preemption: SIGTERM to the rank after iteration 15, then the resume. 3f: Bridge async
# save (torch_dist), SIGKILL of the rank right after a save is scheduled (during it) and after one
# finished, each followed by the resume. Without TE these use the plain optimizer (3c).
BR_NODIST=(optimizer.use_distributed_optimizer=false ddp.use_distributed_optimizer=false)
bridge_preempt() {
  local d=$rec/bridge_preempt
  mkdir -p "$d"
  SIGNAL_AT="iteration +15/ TERM" job bridge_preempt/1_sigterm 240 $(rank_env 41031) python3 "$BR" "${BR_BASE[@]}" \
    "${BR_NODIST[@]}" train.train_iters=60 validation.eval_interval=60 train.exit_signal_handler=true \
    checkpoint.save="$d/ckpt" checkpoint.load="$d/ckpt" checkpoint.save_interval=1000 logger.tensorboard_dir="$d/tb"
  job bridge_preempt/2_resume 240 $(rank_env 41032) python3 "$BR" "${BR_BASE[@]}" \
    "${BR_NODIST[@]}" train.train_iters=60 validation.eval_interval=60 train.exit_signal_handler=true \
    checkpoint.save="$d/ckpt" checkpoint.load="$d/ckpt" checkpoint.save_interval=1000 logger.tensorboard_dir="$d/tb"
}
bridge_async() {  # bridge_async NAME REGEX PORT
  local name=$1 regex=$2 port=$3 d=$rec/$1
  mkdir -p "$d"
  local args=("${BR_BASE[@]}" "${BR_NODIST[@]}" train.train_iters=60 validation.eval_interval=60
    checkpoint.async_save=true checkpoint.ckpt_format=torch_dist checkpoint.save_interval=10
    checkpoint.save="$d/ckpt" checkpoint.load="$d/ckpt" logger.tensorboard_dir="$d/tb")
  SIGNAL_AT="$regex KILL" job "$name/1_sigkill" 240 $(rank_env "$port") python3 "$BR" "${args[@]}"
  ls -lR "$d/ckpt" > "$d/1_sigkill/ckpt_after_kill.txt" 2>&1
  job "$name/2_resume" 240 $(rank_env "$((port + 1))") python3 "$BR" "${args[@]}"
}

# Early stop: if both correlation runs fail at start-up, the rest would fail alike; pack and return
# early so that a fixed second call still fits the budget.
stop_all() {  # no new run starts, every running one is killed with its process group
  touch "$rec/stop"
  while read -r g; do kill -KILL -- "-$g" 2>/dev/null; done < "$rec/groups"
}
early_stop_watch() {
  while [[ ! -e $rec/mlm_corr/rc || ! -e $rec/bridge_corr/rc ]]; do [[ -e $rec/done ]] && return; sleep 1; done
  if [[ $(cat "$rec/mlm_corr/rc") != 0 && $(cat "$rec/bridge_corr/rc") != 0 ]]; then
    log "EARLY STOP: both correlation runs failed; stopping every run"
    stop_all
  fi
}

touch "$rec/groups"
chains=()
mlm_corr & chains+=($!)
mlm_corr_lr6e4 & chains+=($!)
bridge_corr & chains+=($!)
mlm_ft mlm_ft_kill sigkill & chains+=($!)
mlm_ft mlm_ft_hang sigstop & chains+=($!)
rerun_transient & chains+=($!)
rerun_persistent & chains+=($!)
MLM_PORT=41041 mlm_resume mlm_resume_distopt --use-distributed-optimizer & chains+=($!)
MLM_PORT=41051 mlm_resume mlm_resume_plain & chains+=($!)
repro & chains+=($!)
bridge_preempt & chains+=($!)
bridge_async bridge_async_kill_during "scheduled an async checkpoint save at iteration +20" 41061 & chains+=($!)
bridge_async bridge_async_kill_after "iteration +25/" 41071 & chains+=($!)
bridge_simfault_both & chains+=($!)
early_stop_watch & watch_pid=$!
(
  for ((i = 0; i < 470; i++)); do [[ -e $rec/done ]] && exit; sleep 1; done
  log "DEADLINE: stopping the runs still going"; stop_all
) & deadline_pid=$!
wait "${chains[@]}"
touch "$rec/done"
wait "$watch_pid" "$deadline_pid"  # a bare wait would also wait for the tee above, forever

log "packing"
for d in "$rec"/*/ "$rec"/*/*/; do
  for c in "$d"ckpt; do
    [[ -d $c ]] || continue
    ls -lR "$c" > "$d/ckpt_ls.txt" 2>&1
    cp "$c/latest_checkpointed_iteration.txt" "$d/" 2>/dev/null
    cp "$c/ft_state.json" "$d/" 2>/dev/null
  done
done
( cd /tmp && find megatron-rec -type f \( -name '*.log' -o -name '*.txt' -o -name '*.tsv' -o -name rc \
    -o -name 'ft_state.json' -o -name 'events.out.tfevents*' \) -not -path '*/ckpt/*' -size -8M -print0 \
  | tar --null -czf "$out/megatron-rec.tar.gz" -T - )
sort "$rec/summary.tsv" | awk -F'\t' 'BEGIN{printf "%-40s %5s %8s\n", "run", "exit", "wall_s"} {printf "%-40s %5s %8.1f\n", $1, $2, $3}' \
  | tee "$out/summary.txt"
cat "$rec/bridge_pace.txt" >> "$out/summary.txt" 2>/dev/null
ls -la "$out"
log "done"
