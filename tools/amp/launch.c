/* See launch.h. With AMP_HAVE_MPI (the Makefile defines it when it finds mpicc) this uses
 * amp/comm_mpi.h; without it, a process started by mpirun says so instead of training alone. */
#include <stdio.h>
#include <stdlib.h>

#include "launch.h"

#ifdef AMP_HAVE_MPI
#include "amp/comm_mpi.h"
#endif

int amp_cli_mpi_ranks(void) {
    static const char *const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof size_vars / sizeof size_vars[0]; i++) {
        const char *v = getenv(size_vars[i]);
        if (v && atoi(v) >= 1) return atoi(v);
    }
    return 0;
}

int amp_cli_launched_by_mpi(void) { return amp_cli_mpi_ranks() > 0 || getenv("PMIX_RANK") != NULL; }

#ifdef AMP_HAVE_MPI

int amp_cli_comm_start(amp_comm **comm, char *err, size_t err_size) {
    *comm = NULL;
    if (!amp_cli_launched_by_mpi()) return AMP_OK;
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        snprintf(err, err_size, "cannot initialise MPI");
        return AMP_ERR_IO;
    }
    return amp_comm_mpi_create(MPI_COMM_WORLD, comm, err, err_size);
}

int amp_cli_comm_abort(amp_comm *comm, int code) {
    if (comm && comm->size > 1) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    return code;
}

void amp_cli_comm_finish(amp_comm *comm) {
    int init = 0, fin = 0;
    if (comm) comm->free(comm);
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Finalize();
}

#else

int amp_cli_comm_start(amp_comm **comm, char *err, size_t err_size) {
    *comm = NULL;
    const int ranks = amp_cli_mpi_ranks();
    if (ranks > 1) {
        snprintf(err, err_size, "started by an MPI launcher with %d ranks, but this amp was built without MPI "
                                "(install libopenmpi-dev and rebuild)", ranks);
        return AMP_ERR_INVALID_ARGUMENT;
    }
    return AMP_OK;
}

int amp_cli_comm_abort(amp_comm *comm, int code) {
    (void)comm;
    return code;
}

void amp_cli_comm_finish(amp_comm *comm) { (void)comm; }

#endif
