// What the launcher says about this process, read from its environment in
// one place: Open MPI (OMPI_COMM_WORLD_*), PMIx and PMI (srun --mpi=pmix,
// MPICH's Hydra), Slurm (SLURM_*) and torchrun-style LOCAL_RANK. Known
// before MPI starts, so heartbeats and device choice need no collective.
// A variable that is not a number in range is ignored (the next one asked
// answers), never a crash.
#pragma once

namespace ht {

/// Whether an MPI launcher (mpirun, or srun with PMIx/PMI) started this
/// process: then the job spans every rank of MPI_COMM_WORLD.
bool launched_by_mpi();
/// The world rank the launcher gave this process (OMPI_COMM_WORLD_RANK,
/// PMIX_RANK, PMI_RANK, SLURM_PROCID, in that order: SLURM_PROCID last, since
/// an MPI launcher inside an allocation leaves its proxy's value in every
/// rank), or -1.
int launcher_rank();
/// This process's rank among the job's processes on its node
/// (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID, LOCAL_RANK);
/// 0 when none says.
int launcher_local_rank();
/// The job's processes on this node (OMPI_COMM_WORLD_LOCAL_SIZE,
/// SLURM_NTASKS_PER_NODE, MPI_LOCALNRANKS), or `otherwise` when none says.
int launcher_local_size(int otherwise);

}  // namespace ht
