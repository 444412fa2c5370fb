// Ranks that would run different weights refuse to start: every rank fingerprints its
// checkpoint (the tensor table, and sampled bytes of every tensor: cheap, no full read) and
// the fingerprints are compared before any weight is bound.
#pragma once
#include <string>

#include "dist/communicator.h"
#include "io/checkpoint.h"

namespace zen::dist {

// Collective. Throws zen::Error (on every rank) naming the first rank that differs from rank 0,
// both paths, and what differs: the tensor count, the tensor table (names, dtypes, shapes), or
// the first tensor whose sampled bytes differ.
void check_same_model(Communicator& comm, const Checkpoint& ckpt);

}  // namespace zen::dist
