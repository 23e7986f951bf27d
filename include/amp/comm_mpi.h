/* The MPI backend of amp_comm (amp/comm.h): data-parallel training over Open MPI or any MPI 3
 * implementation. Built when `make` finds mpicc (library build/libamp_mpi.a; link it with the MPI
 * libraries, e.g. `mpicc ... -lamp_mpi -lamp`); the core library never links MPI.
 *
 *     MPI_Init(&argc, &argv);
 *     amp_comm *comm;  char err[256];
 *     if (amp_comm_mpi_create(MPI_COMM_WORLD, &comm, err, sizeof err) != AMP_OK) ...
 *     cfg.comm = comm;  amp_train_run(&cfg, ...);      // every rank, same cfg
 *     comm->free(comm);  MPI_Finalize();
 *
 * The communicator is duplicated (amp's traffic never matches the caller's messages) and set to return
 * errors instead of aborting, so a transport failure comes back as a status. A rank that fails on
 * its own (its data file is bad, it ran out of memory) leaves its peers waiting in the next
 * collective: the program should then call MPI_Abort, as `amp train` does. A rank that dies is
 * noticed by the launcher (mpirun), which stops the others.
 *
 * Gradients: fp32 buckets are summed with MPI_Iallreduce (started while backward runs; progressed
 * from the grad-ready hook). fp16/bf16 buckets, and fp32 ones sent as fp16/bf16, are summed by a
 * reduce-scatter (MPI_Ialltoall: rank p receives everyone's p-th chunk), an fp32 accumulation of the
 * chunk in rank order, one rounding, and an allgather (MPI_Iallgather, on a second duplicate of the
 * communicator so that the order in which ranks reach it cannot cross the first stage's): one
 * rounding however many ranks, where a reduction tree in the narrow type would round at every level.
 * Both stages overlap backward. Both paths give every rank the same bits. e5m2 buffers (the fp8 wire:
 * the training scales and encodes, amp/comm.h) take the narrow path with one byte per value.
 *
 * Sharded training (amp_train_config.zero_stage 1): reduce_scatter is MPI_Reduce_scatter for fp32
 * buffers on an fp32 wire (in place; the result moved from the buffer's start to this rank's range)
 * and the narrow sum above over the whole buffer otherwise; allgather is MPI_Allgatherv in place
 * (bytes). With the environment variable AMP_COMM_MPI_NO_SHARD_COLLECTIVES set the two are left NULL,
 * so the training's emulation runs instead (a test of it). */
#ifndef AMP_COMM_MPI_H
#define AMP_COMM_MPI_H

#include <stddef.h>

#include <mpi.h>

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MPI must be initialised (and stay so until comm->free). Returns AMP_OK, AMP_ERR_NULL_POINTER,
 * AMP_ERR_OUT_OF_MEMORY or AMP_ERR_IO (an MPI error; err says which). */
int amp_comm_mpi_create(MPI_Comm comm, amp_comm **out, char *err, size_t err_size);

#ifdef __cplusplus
}
#endif
#endif /* AMP_COMM_MPI_H */
