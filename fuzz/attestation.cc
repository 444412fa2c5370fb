// Fuzz target: what `zen verify` and --verify-weights read from untrusted files. The input is,
// at once, a manifest (WeightsDigest::from_json), a DSSE envelope (open_attestation, with a
// key made at start-up: the signature almost never verifies, so the statement parser is also
// fed the input directly), an in-toto statement (parse_statement) and an OpenSSF
// model-signing bundle (verify_model_signing over a scratch folder of one file).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include "attest/attestation.h"
#include "attest/digest.h"
#include "attest/model_signing.h"
#include "fuzz_common.h"

namespace {

const zen::attest::Key& fuzz_key() {
  static const std::optional<zen::attest::Key> key = [] {
    EVP_PKEY* k = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
    BIO* bio = BIO_new(BIO_s_mem());
    PEM_write_bio_PUBKEY(bio, k);
    char* p = nullptr;
    const long n = BIO_get_mem_data(bio, &p);
    std::optional<zen::attest::Key> made(zen::attest::Key::from_public_pem_text(std::string(p, static_cast<size_t>(n))));
    BIO_free(bio);
    EVP_PKEY_free(k);
    return made;
  }();
  return *key;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  volatile size_t sink = 0;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    const zen::attest::WeightsDigest d = zen::attest::WeightsDigest::from_json(j, "manifest");
    sink = sink + d.tensors.size() + d.files.size() + zen::attest::compare_manifest(d, d).size();
  } catch (const nlohmann::json::exception&) {
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
  }
  try {
    sink = sink + zen::attest::open_attestation(text, fuzz_key(), "attestation").files.size();
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
  }
  try {
    sink = sink + zen::attest::parse_statement(text, "statement").files.size();
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
  }
  try {
    static const std::string model_file = zen::fuzz::write_scratch("model/config.json", "{}");
    const std::string bundle = zen::fuzz::write_scratch("model.sig", text);
    sink = sink + model_file.size() +
           zen::attest::verify_model_signing(zen::fuzz::scratch_dir() + "/model", bundle, fuzz_key()).problems.size();
  } catch (const zen::Error& e) {
    zen::fuzz::expected_error(e);
  }
  return 0;
}
