// zen hash | verify | attest: canonical weight digests, their verification, signed records
// (src/attest). Also --verify-weights for run and serve (weights_flags.h).
#include <cstdio>
#include <fstream>

#include "attest/attestation.h"
#include "attest/digest.h"
#include "attest/model_signing.h"
#include "base/error.h"
#include "base/mmap.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/weights_flags.h"

namespace zen::cli {
namespace {

const FlagSpec kThreads{"threads", FlagKind::Int, "hashing threads (default: all cores)", {}};

const std::string& one_path(const Flags& f, const char* usage) {
  if (f.positional().size() != 1) fail("give one checkpoint path: ", usage);
  return f.positional()[0];
}

void write_text(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::fputs(text.c_str(), stdout);
    return;
  }
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out.good()) fail("could not write ", path);
}

void print_digest(const attest::WeightsDigest& d) {
  std::printf("canonicalization: %s\nformat: %s\ntensors: %zu (%.3f GB)\nroot: %s\n", d.canonicalization.c_str(),
              d.format.c_str(), d.tensors.size(), d.tensor_bytes / 1e9, attest::to_hex(d.root).c_str());
  // sha256sum's format, so `zen hash M | grep '  ' | sha256sum -c` works from the folder.
  for (const attest::FileDigest& f : d.files)
    std::printf("%s  %s\t(%s)\n", attest::to_hex(f.sha256).c_str(), f.path.c_str(), f.role.c_str());
  uint64_t file_bytes = 0;
  for (const attest::FileDigest& f : d.files) file_bytes += f.bytes;
  std::fflush(stdout);
  std::fprintf(stderr, "hashed %.3f GB of tensors and %.3f GB of files in %.2f s (%.2f GB/s, %d threads)\n",
               d.tensor_bytes / 1e9, file_bytes / 1e9, d.seconds, (d.tensor_bytes + file_bytes) / 1e9 / d.seconds,
               d.threads);
}

}  // namespace

int hash_command(int argc, char** argv) {
  Flags f("hash", {{"json", FlagKind::String, "also write the manifest (root, per-tensor leaves, file hashes) to FILE ('-': stdout)", {}},
                   {"gguf-hash", FlagKind::Bool, "print llama-gguf-hash --sha256's lines for a GGUF instead", {}},
                   {"no-file-hashes", FlagKind::Bool, "skip the whole weight files' plain SHA-256 (the root alone)", {}},
                   kThreads, kHelpFlag});
  f.parse(argc, argv, 2);
  if (wants_help(f)) return 0;
  const std::string& path = one_path(f, "zen hash PATH [--json FILE] [--gguf-hash]");
  if (f.flag("gguf-hash")) {
    for (const std::string& line : attest::gguf_hash_lines(path)) std::printf("%s\n", line.c_str());
    return 0;
  }
  attest::DigestOptions options;
  options.threads = threads_flag(f);
  options.weight_files = !f.flag("no-file-hashes");
  const attest::WeightsDigest d = attest::digest_weights(path, options);
  if (f.has("json")) write_text(f.str("json"), d.to_json().dump(1) + "\n");
  if (f.str("json") != "-") print_digest(d);
  return 0;
}

int verify_command(int argc, char** argv) {
  Flags f("verify", {{"expect", FlagKind::String, "the expected weights root (64 hex digits)", {}},
                     {"manifest", FlagKind::String, "a manifest from zen hash --json: names every tensor that differs", {}},
                     {"attestation", FlagKind::String, "a signed attestation from zen attest (needs --public-key)", {}},
                     {"model-signing", FlagKind::String, "an OpenSSF model-signing signature (needs --public-key)", {}},
                     {"public-key", FlagKind::String, "the signer's public key (PEM: EC or Ed25519)", {}},
                     kThreads, kHelpFlag});
  f.parse(argc, argv, 2);
  if (wants_help(f)) return 0;
  const std::string& path =
      one_path(f, "zen verify PATH (--expect ROOT | --manifest FILE | --attestation FILE --public-key PUB | --model-signing SIG --public-key PUB)");
  const int given = f.has("expect") + f.has("manifest") + f.has("attestation") + f.has("model-signing");
  if (given != 1) fail("give exactly one of --expect, --manifest, --attestation, --model-signing");
  if ((f.has("attestation") || f.has("model-signing")) != f.has("public-key"))
    fail(f.has("public-key") ? "--public-key goes with --attestation or --model-signing"
                             : "--attestation and --model-signing need --public-key PUB.pem");
  if (f.has("model-signing")) {
    const attest::Key key = attest::Key::load_public_pem(f.str("public-key"));
    const attest::ModelSigningReport r = attest::verify_model_signing(path, f.str("model-signing"), key);
    for (const std::string& p : r.problems) std::printf("model-signing: %s\n", p.c_str());
    if (r.ok()) std::printf("model-signing: verified %zu files of %s\n", r.files_checked, r.model_name.c_str());
    return r.ok() ? 0 : 1;
  }
  const std::string expected = f.has("expect") ? f.str("expect") : f.has("manifest") ? f.str("manifest") : f.str("attestation");
  if (f.has("manifest") || f.has("attestation")) {
    if (!file_exists(expected)) fail(expected, ": no such file");
  }
  const attest::WeightsCheck c = attest::check_weights(path, expected, f.str("public-key"), threads_flag(f));
  for (const std::string& p : c.problems) std::printf("verify: %s\n", p.c_str());
  std::printf("verify: %s: %s\n", c.ok() ? "OK" : "FAILED", c.summary.c_str());
  return c.ok() ? 0 : 1;
}

int attest_command(int argc, char** argv) {
  Flags f("attest", {{"key", FlagKind::String, "the signing key (PEM, unencrypted: EC P-256/P-384/P-521 or Ed25519)", {}},
                     {"config-hash", FlagKind::String, "SHA-256 of the training config to record (hex, optionally sha256:)", {}},
                     {"benchmarks", FlagKind::String, "a JSON file of benchmark results to record", {}},
                     {"output", FlagKind::String, "where to write the envelope (default: stdout)", {}},
                     kThreads, kHelpFlag});
  f.parse(argc, argv, 2);
  if (wants_help(f)) return 0;
  const std::string& path = one_path(f, "zen attest PATH --key KEY.pem [--config-hash HEX] [--benchmarks FILE] [--output FILE]");
  if (!f.has("key")) fail("give the signing key: --key KEY.pem");
  const attest::Key key = attest::Key::load_private_pem(f.str("key"));
  attest::AttestOptions options;
  options.training_config_sha256 = f.str("config-hash");
  if (f.has("config-hash")) attest::digest_from_hex(options.training_config_sha256, "--config-hash");  // now, not after hashing
  if (f.has("benchmarks")) {
    const std::string text = read_text_file(f.str("benchmarks"));
    if (text.size() > (size_t{1} << 20)) fail(f.str("benchmarks"), ": more than 1 MiB of benchmark results");
    try {
      options.benchmarks = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail(f.str("benchmarks"), ": not JSON: ", e.what());
    }
  }
  attest::DigestOptions digest_options;
  digest_options.threads = threads_flag(f);
  digest_options.weight_files = false;
  const attest::WeightsDigest d = attest::digest_weights(path, digest_options);
  const std::string envelope = attest::sign_statement(attest::make_statement(d, options), key);
  write_text(f.str("output", "-"), envelope);
  std::fprintf(stderr, "attest: root %s signed with %s key %s\n", attest::to_hex(d.root).c_str(), key.algorithm().c_str(),
               key.key_id().substr(0, 16).c_str());
  return 0;
}

}  // namespace zen::cli
