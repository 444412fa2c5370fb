// The MPI implementation of Communicator (mpi_communicator.cc). Built with MPI when CMake
// finds it (ZEN_HAVE_MPI); otherwise available() is false and the rest throws.
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace zen::dist::mpi {

bool available();
bool initialized();  // MPI_Init done and MPI_Finalize not yet
// MPI_Init_thread (SERIALIZED: the engine thread, not main, runs the forward) and a
// communicator over MPI_COMM_WORLD.
std::unique_ptr<Communicator> init_world(int* argc, char*** argv);
void finalize();
[[noreturn]] void abort_world(int exit_code);

}  // namespace zen::dist::mpi
