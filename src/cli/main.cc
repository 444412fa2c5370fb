// zen: command-line entry point.
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/weights_flags.h"
#include "dist/communicator.h"
#include "kernels/cpu/packed.h"

namespace {

const char* kUsage =
    "usage: zen <command> [flags]\n"
    "commands:\n"
    "  run         generate text from a prompt (streams to stdout; speed on stderr)\n"
    "  tokenize    print the token ids of a text\n"
    "  perplexity  perplexity of a model on a text file\n"
    "  inspect     describe a checkpoint and check it loads strictly\n"
    "  serve       OpenAI-compatible HTTP server with a chat page (default http://127.0.0.1:30000/)\n"
    "  bench       offline serving benchmark: concurrency matrix and warm/cold prefix table\n"
    "  hash        canonical weights digest (per-tensor Merkle root) and file SHA-256s\n"
    "  verify      check weights against a root, a manifest, an attestation or a model-signing signature\n"
    "  attest      write a signed attestation (in-toto statement in a DSSE envelope)\n"
    "  grammar     compile a JSON Schema / regex / GBNF grammar for a vocabulary; time masks, check texts\n"
    "  plan        lay a model out over N nodes (TP / EP / PP): per-rank memory, collectives, decode bound\n"
    "run 'zen <command> --help' for its flags\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  // Under mpirun every rank runs this same command line (src/dist); an error on one rank ends
  // them all rather than leaving the others waiting in a collective.
  std::unique_ptr<zen::dist::Session> session;
  auto who = [&] {
    const zen::dist::Communicator& w = zen::dist::world();
    return w.size() > 1 ? command + " (rank " + std::to_string(w.rank()) + ")" : command;
  };
  try {
    session = std::make_unique<zen::dist::Session>(&argc, &argv);
    zen::kernels::PackedMatrix::isa();  // a bad ZEN_PACKED_ISA fails here, before any work
    if (command == "run") return zen::cli::run_command(argc, argv);
    if (command == "tokenize") return zen::cli::tokenize_command(argc, argv);
    if (command == "perplexity") return zen::cli::perplexity_command(argc, argv);
    if (command == "inspect") return zen::cli::inspect_command(argc, argv);
    if (command == "bench") return zen::cli::bench_command(argc, argv);
    if (command == "serve") return zen::cli::serve_command(argc, argv);
    if (command == "hash") return zen::cli::hash_command(argc, argv);
    if (command == "verify") return zen::cli::verify_command(argc, argv);
    if (command == "attest") return zen::cli::attest_command(argc, argv);
    if (command == "grammar") return zen::cli::grammar_command(argc, argv);
    if (command == "plan") return zen::cli::plan_command(argc, argv);
    std::fprintf(stderr, "zen: unknown command '%s'\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const zen::Error& e) {
    std::fprintf(stderr, "zen %s: error: %s\n", who().c_str(), e.what());
    std::fflush(stderr);
    if (session) session->fail_job(1);
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zen %s: internal error: %s\n", who().c_str(), e.what());
    std::fflush(stderr);
    if (session) session->fail_job(3);
    return 3;
  }
}
