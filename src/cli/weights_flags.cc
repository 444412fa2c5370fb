#include "cli/weights_flags.h"

#include <cstdio>

#include "attest/attestation.h"
#include "base/error.h"

namespace zen::cli {

std::vector<FlagSpec> with_weights_flags(std::vector<FlagSpec> specs) {
  specs.push_back({"verify-weights", FlagKind::String,
                   "refuse to start unless the weights match: a root (zen hash), a manifest (zen hash --json) or an attestation (zen attest)", {}});
  specs.push_back({"verify-weights-key", FlagKind::String, "the public key (PEM) that signed --verify-weights' attestation", {}});
  return specs;
}

std::string verify_weights_flag(const Flags& f, const std::string& model_path, int threads) {
  if (!f.has("verify-weights")) {
    if (f.has("verify-weights-key")) fail("--verify-weights-key needs --verify-weights ATTESTATION");
    return "";
  }
  const attest::WeightsCheck c = attest::check_weights(model_path, f.str("verify-weights"), f.str("verify-weights-key"), threads);
  if (!c.ok()) {
    std::string list;
    for (const std::string& p : c.problems) list += "\n  " + p;
    fail("--verify-weights: ", model_path, " does not match ", f.str("verify-weights"), ":", list);
  }
  std::fprintf(stderr, "verify-weights: OK: %s\n", c.summary.c_str());
  return attest::to_hex(c.digest.root);
}

}  // namespace zen::cli
