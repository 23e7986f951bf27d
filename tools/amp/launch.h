/* The CLI's side of data-parallel training: when `amp train` runs under mpirun (and amp was built
 * with MPI), it initialises MPI and hands amp_train_run an MPI communicator; otherwise it trains in
 * one process. */
#ifndef AMP_TOOLS_LAUNCH_H
#define AMP_TOOLS_LAUNCH_H

#include <stddef.h>

#include "amp.h"

/* True when a launcher (mpirun / mpiexec of Open MPI or MPICH, srun with PMI) started this process. */
int amp_cli_launched_by_mpi(void);
/* The number of ranks the launcher started (from its environment), 0 when none did. */
int amp_cli_mpi_ranks(void);
/* Launched by MPI: MPI_Init and the communicator (*comm); else *comm = NULL. Returns AMP_OK, or an
 * error with err filled (among others: amp built without MPI but started by mpirun). */
int amp_cli_comm_start(amp_comm **comm, char *err, size_t err_size);
/* After a failure on this rank: stops every rank with `code` (MPI_Abort) so none waits forever for
 * this one; returns code when there is no MPI. */
int amp_cli_comm_abort(amp_comm *comm, int code);
/* Frees the communicator and finalises MPI. */
void amp_cli_comm_finish(amp_comm *comm);

#endif
