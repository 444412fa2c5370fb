// A communicator of N threads in one process: the ranks of a tensor-parallel model run side by
// side without mpirun, so the sharded models are tested in the ordinary test binary (and under
// the sanitizers) against the single-process model. Reductions add the ranks' values in rank
// order, the same on every rank.
#pragma once
#include <barrier>
#include <memory>
#include <vector>

#include "dist/communicator.h"

namespace zen::dist {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size);
  ~ThreadGroup();
  int size() const { return static_cast<int>(members_.size()); }
  // The communicator rank r's thread uses (the group must outlive it).
  Communicator& member(int rank) { return *members_[static_cast<size_t>(rank)]; }

  // Shared by the members (thread_group.cc).
  struct Shared;

 private:
  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Communicator>> members_;
};

}  // namespace zen::dist
