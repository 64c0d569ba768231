"""The PyTorch benchmarks' own launcher (bench/ddp_lenet_torch.py, bench/fsdp_torch.py), as
bench/rank_processes.h is the C++ ones': starts one process of the running script per rank and
waits for them, and joins a rank to the others.

    if "RANK" in os.environ:
        init_rank_process_group(); ...
    else:
        run_self_on_ranks(args.world, "fsdp_torch")
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch.distributed as dist


def bind_to_core_share(rank, world):
    """Binds this process to rank `rank`'s share of the cores it may run on, as `kiln-run
    --bind-cores` binds its processes (apps/kiln-run/plan.h, share_cores): contiguous shares in
    order, the first (cores % world) one core larger. Returns the share."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < world:
        sys.exit(f"--bind-cores gives each process at least one core, but {world} processes would share "
                 f"the {len(cores)} cores this process may run on")
    each, larger = divmod(len(cores), world)
    start = rank * each + min(rank, larger)
    share = cores[start:start + each + (1 if rank < larger else 0)]
    os.sched_setaffinity(0, share)
    return share


def run_self_on_ranks(world, program):
    """Starts `world` ranks of the running script with its arguments, RANK, WORLD_SIZE,
    OMP_NUM_THREADS=1 and KILN_BENCH_STORE (a file store in a fresh temporary folder) set; when
    one fails, stops the others, which would wait for it, and exits saying which (as `program`)."""
    folder = tempfile.mkdtemp(prefix=f"kiln_{program}_")
    try:
        ranks = []
        for rank in range(world):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), OMP_NUM_THREADS="1",
                       KILN_BENCH_STORE="file://" + os.path.join(folder, "store"))
            ranks.append(subprocess.Popen([sys.executable, os.path.abspath(sys.argv[0])] + sys.argv[1:], env=env))
        failed = None
        while any(p.returncode is None for p in ranks):
            for rank, p in enumerate(ranks):
                if p.returncode is None and p.poll() is not None and p.returncode != 0 and failed is None:
                    failed = rank
                    for other in ranks:
                        if other.poll() is None:
                            other.terminate()
            time.sleep(0.05)
        if failed is not None:
            sys.exit(f"{program}: rank {failed} of {world} failed (its message is above); stopped the others")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def init_rank_process_group():
    """The gloo process group: through the driver's file store (KILN_BENCH_STORE, with RANK and
    WORLD_SIZE) or, started by a launcher, through env://."""
    store = os.environ.get("KILN_BENCH_STORE")
    if store:
        dist.init_process_group("gloo", init_method=store, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]))
    else:
        dist.init_process_group("gloo", init_method="env://")
