// Self-consistency of the model-signing verifier: the tests sign bundles the way model-signing's
// key signer does (tests/test_model_signing.py checks against the real tool).
#include "attest/model_signing.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace zen::attest {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kPayloadType = "application/vnd.in-toto+json";

fs::path fresh_dir() {
  static int counter = 0;
  const fs::path p = fs::path(::testing::TempDir()) /
                     ("zen_model_signing_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  fs::remove(p);
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << p;
}

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A fresh EC private key (curve "P-256", "P-384", "P-521") written as PEM, then loaded.
Key generate_key(const char* curve, const fs::path& pem) {
  EVP_PKEY* k = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", curve);
  EXPECT_NE(k, nullptr);
  BIO* bio = BIO_new_file(pem.c_str(), "w");
  EXPECT_EQ(PEM_write_bio_PrivateKey(bio, k, nullptr, nullptr, 0, nullptr, nullptr), 1);
  BIO_free(bio);
  EVP_PKEY_free(k);
  return Key::load_private_pem(pem.string());
}

json resource(const std::string& name, const Digest& d, const std::string& algorithm = "sha256") {
  return {{"name", name}, {"digest", to_hex(d)}, {"algorithm", algorithm}};
}

// What model-signing's "files" serialization lists: every regular file not under `ignore`, sorted.
json file_resources(const fs::path& dir, const std::vector<std::string>& ignore) {
  std::vector<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = e.path().lexically_relative(dir).generic_string();
    const bool skip = std::any_of(ignore.begin(), ignore.end(),
                                  [&](const std::string& p) { return rel == p || rel.starts_with(p + "/"); });
    if (!skip && !e.is_symlink() && e.is_regular_file()) names.push_back(rel);
  }
  std::sort(names.begin(), names.end());
  json out = json::array();
  for (const auto& n : names) out.push_back(resource(n, sha256_file((dir / n).string())));
  return out;
}

json serialization(const std::vector<std::string>& ignore, const std::string& method = "files") {
  return {{"method", method}, {"hash_type", "sha256"}, {"allow_symlinks", false}, {"ignore_paths", ignore}};
}

Digest subject_digest(const json& resources) {
  Sha256 h;
  for (const auto& r : resources) {
    const Digest d = digest_from_hex(r["digest"].get<std::string>(), "test");
    h.update(d.data(), d.size());
  }
  return h.finish();
}

json statement(const std::string& name, const json& ser, const json& resources) {
  json subject = {{"name", name}, {"digest", {{"sha256", to_hex(subject_digest(resources))}}}};
  return {{"_type", "https://in-toto.io/Statement/v1"},
          {"subject", json::array({subject})},
          {"predicateType", "https://model_signing/signature/v1.0"},
          {"predicate", {{"serialization", ser}, {"resources", resources}}}};
}

// A Sigstore bundle as model-signing's elliptic-key signer writes it.
json bundle(const std::string& payload, const Key& key) {
  const std::string sig = key.sign(dsse_pae(kPayloadType, payload));
  json signature = {{"sig", base64_encode(sig)}, {"keyid", ""}};
  return {{"mediaType", "application/vnd.dev.sigstore.bundle.v0.3+json"},
          {"verificationMaterial",
           {{"publicKey", {{"hint", to_hex(sha256(key.public_pem()))}}}, {"tlogEntries", json::array()}}},
          {"dsseEnvelope",
           {{"payload", base64_encode(payload)},
            {"payloadType", kPayloadType},
            {"signatures", json::array({signature})}}}};
}

class ModelSigning : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fresh_dir();
    dir_ = base_ / "model";
    sig_ = base_ / "model.sig";
    std::string weights;
    for (int i = 0; i < 1000; ++i) weights.push_back(static_cast<char>(i * 37 % 251));
    write(dir_ / "model.safetensors", weights);
    write(dir_ / "config.json", R"({"hidden_size": 8})");
    write(dir_ / "sub" / "tokenizer.json", "{}");
    write(dir_ / "empty.txt", "");
    write(dir_ / ".git" / "HEAD", "ref: refs/heads/main\n");
    key_.emplace(generate_key("P-256", base_ / "key.pem"));
    pub_.emplace(Key::from_public_pem_text(key_->public_pem()));
    other_pub_.emplace(Key::from_public_pem_text(generate_key("P-256", base_ / "other.pem").public_pem()));
  }

  // Signs the folder as `model_signing sign key` does (files, sha256, git paths ignored).
  void sign(const std::vector<std::string>& extra_ignores = {}) {
    std::vector<std::string> ignore = {".git", ".gitattributes", ".github", ".gitignore"};
    ignore.insert(ignore.end(), extra_ignores.begin(), extra_ignores.end());
    sign_statement(statement("model", serialization(ignore), file_resources(dir_, ignore)));
  }
  void sign_statement(const json& st) { sign_payload(st.dump(2)); }
  void sign_payload(const std::string& payload) { write(sig_, bundle(payload, *key_).dump(2)); }

  ModelSigningReport verify(const Key& key) { return verify_model_signing(dir_.string(), sig_.string(), key); }
  ModelSigningReport verify() { return verify(*pub_); }

  // The zen::Error message of verifying, or "" when it does not throw.
  std::string error() {
    try {
      verify();
      return "";
    } catch (const Error& e) {
      return e.what();
    }
  }
  std::string error_of_bundle_text(const std::string& text) {
    write(sig_, text);
    return error();
  }
  std::string error_of_statement(const json& st) {
    sign_statement(st);
    return error();
  }

  json good_bundle() {
    sign();
    return json::parse(read(sig_));
  }

  fs::path base_, dir_, sig_;
  std::optional<Key> key_, pub_, other_pub_;
};

#define EXPECT_ERROR(expr, fragment)                                           \
  do {                                                                         \
    const std::string msg_ = (expr);                                           \
    EXPECT_NE(msg_, "") << "expected an error containing: " << (fragment);     \
    EXPECT_NE(msg_.find(fragment), std::string::npos) << "message: " << msg_; \
  } while (0)

using Problems = std::vector<std::string>;

TEST_F(ModelSigning, GoodSignatureVerifies) {
  sign();
  const ModelSigningReport r = verify();
  EXPECT_TRUE(r.ok()) << ::testing::PrintToString(r.problems);
  EXPECT_EQ(r.model_name, "model");
  EXPECT_EQ(r.files_checked, 4u);  // config.json empty.txt model.safetensors sub/tokenizer.json
}

TEST_F(ModelSigning, LargerCurvesVerify) {
  for (const char* curve : {"P-384", "P-521"}) {
    key_.emplace(generate_key(curve, base_ / "big.pem"));
    pub_.emplace(Key::from_public_pem_text(key_->public_pem()));
    sign();
    EXPECT_TRUE(verify().ok()) << curve;
  }
}

TEST_F(ModelSigning, TrailingSlashOnTheFolderIsFine) {
  sign();
  EXPECT_TRUE(verify_model_signing(dir_.string() + "/", sig_.string(), *pub_).ok());
}

TEST_F(ModelSigning, TamperedFileIsNamed) {
  sign();
  std::string w = read(dir_ / "model.safetensors");
  w[500] ^= 1;
  write(dir_ / "model.safetensors", w);
  const ModelSigningReport r = verify();
  EXPECT_EQ(r.problems, Problems{"model.safetensors: digest differs"});
  EXPECT_EQ(r.files_checked, 4u);
}

TEST_F(ModelSigning, MissingFileIsNamed) {
  sign();
  fs::remove(dir_ / "sub" / "tokenizer.json");
  EXPECT_EQ(verify().problems, Problems{"sub/tokenizer.json: missing"});
}

TEST_F(ModelSigning, ExtraFileIsNamed) {
  sign();
  write(dir_ / "extra.txt", "x");
  write(dir_ / "sub" / "more" / "deep.bin", "y");
  EXPECT_EQ(verify().problems,
            (Problems{"extra.txt: present but not in the signature",
                      "sub/more/deep.bin: present but not in the signature"}));
}

TEST_F(ModelSigning, IgnoredPathsAreNotExtra) {
  sign({"notes", "README.md"});
  write(dir_ / "notes" / "a.txt", "x");
  write(dir_ / "README.md", "x");
  write(dir_ / ".github" / "workflow.yml", "x");
  write(dir_ / ".git" / "objects" / "ab", "x");
  write(dir_ / "notes.txt", "not under notes/");
  EXPECT_EQ(verify().problems, Problems{"notes.txt: present but not in the signature"});
}

TEST_F(ModelSigning, SignatureInsideTheFolderIsNotExtra) {
  sign();
  fs::rename(sig_, dir_ / "model.sig");
  sig_ = dir_ / "model.sig";
  EXPECT_TRUE(verify().ok()) << ::testing::PrintToString(verify().problems);
}

TEST_F(ModelSigning, WrongKeyFails) {
  sign();
  const ModelSigningReport r = verify(*other_pub_);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_TRUE(r.problems[0].starts_with("signature does not verify with the given public key")) << r.problems[0];
  EXPECT_EQ(r.model_name, "");
  EXPECT_EQ(r.files_checked, 0u);
}

TEST_F(ModelSigning, EditedPayloadFails) {
  json b = good_bundle();
  std::string payload = base64_decode(b["dsseEnvelope"]["payload"].get<std::string>(), "test");
  const size_t at = payload.find("\"model\"");
  ASSERT_NE(at, std::string::npos);
  payload.replace(at, 7, "\"other\"");
  b["dsseEnvelope"]["payload"] = base64_encode(payload);
  write(sig_, b.dump());
  EXPECT_EQ(verify().problems, Problems{"signature does not verify with the given public key"});
}

TEST_F(ModelSigning, EditedSignatureFails) {
  json b = good_bundle();
  std::string sig = base64_decode(b["dsseEnvelope"]["signatures"][0]["sig"].get<std::string>(), "test");
  sig[sig.size() - 3] ^= 4;
  b["dsseEnvelope"]["signatures"][0]["sig"] = base64_encode(sig);
  write(sig_, b.dump());
  EXPECT_EQ(verify().problems, Problems{"signature does not verify with the given public key"});
}

TEST_F(ModelSigning, SubjectDigestMustMatchTheResources) {
  json st = statement("model", serialization({".git"}), file_resources(dir_, {".git"}));
  st["subject"][0]["digest"]["sha256"] = std::string(64, '0');
  sign_statement(st);
  EXPECT_EQ(verify().problems, Problems{"the statement's subject digest does not match its resources"});
}

TEST_F(ModelSigning, ShardsVerify) {
  const std::string w = read(dir_ / "model.safetensors");  // 1000 bytes in 300-byte shards
  auto shards_statement = [&] {
    json resources = json::array();
    for (size_t at = 0; at < w.size(); at += 300) {
      const size_t end = std::min(w.size(), at + 300);
      resources.push_back(resource("model.safetensors:" + std::to_string(at) + ":" + std::to_string(end),
                                   sha256(w.data() + at, end - at), "sha256-sharded-300"));
    }
    for (const char* name : {"config.json", "sub/tokenizer.json"}) {  // shorter than a shard; empty.txt: none
      const std::string bytes = read(dir_ / name);
      resources.push_back(resource(std::string(name) + ":0:" + std::to_string(bytes.size()), sha256(bytes),
                                   "sha256-sharded-300"));
    }
    json ser = serialization({".git"}, "shards");
    ser["shard_size"] = 300.0;
    return statement("model", ser, resources);
  };
  sign_statement(shards_statement());
  ModelSigningReport r = verify();
  EXPECT_TRUE(r.ok()) << ::testing::PrintToString(r.problems);
  EXPECT_EQ(r.files_checked, 3u);

  std::string tampered = w;
  tampered[950] ^= 1;
  write(dir_ / "model.safetensors", tampered);
  EXPECT_EQ(verify().problems, Problems{"model.safetensors: digest differs"});
  write(dir_ / "model.safetensors", w + "x");
  EXPECT_EQ(verify().problems, Problems{"model.safetensors: size differs (signed 1000 bytes, found 1001)"});

  json st = shards_statement();
  st["predicate"]["resources"].erase(1);  // a gap: 0:300 then 600:900
  st["subject"][0]["digest"]["sha256"] = to_hex(subject_digest(st["predicate"]["resources"]));
  EXPECT_ERROR(error_of_statement(st), "do not cut it into 300-byte pieces");
  st = shards_statement();
  st["predicate"]["serialization"]["shard_size"] = 2.5;
  EXPECT_ERROR(error_of_statement(st), "shard_size: expected a positive whole number");
  st = shards_statement();
  st["predicate"]["resources"][0]["name"] = "model.safetensors:0";
  EXPECT_ERROR(error_of_statement(st), "is not PATH:START:END");
}

TEST_F(ModelSigning, SingleFileModel) {
  const fs::path file = dir_ / "model.safetensors";
  sign_statement(statement("model.safetensors", serialization({".git"}),
                           json::array({resource(".", sha256_file(file.string()))})));
  ModelSigningReport r = verify_model_signing(file.string(), sig_.string(), *pub_);
  EXPECT_TRUE(r.ok()) << ::testing::PrintToString(r.problems);
  EXPECT_EQ(r.files_checked, 1u);
  write(file, "changed");
  r = verify_model_signing(file.string(), sig_.string(), *pub_);
  EXPECT_EQ(r.problems, Problems{"model.safetensors: digest differs"});
  // The folder against a single-file signature.
  EXPECT_FALSE(verify().ok());
}

TEST_F(ModelSigning, SymlinksOnlyWhereTheSignatureAllowsThem) {
  fs::create_symlink("config.json", dir_ / "link.json");
  json resources = file_resources(dir_, {".git"});
  resources.push_back(resource("link.json", sha256_file((dir_ / "config.json").string())));
  json ser = serialization({".git"});
  ser["allow_symlinks"] = true;
  sign_statement(statement("model", ser, resources));
  EXPECT_TRUE(verify().ok()) << ::testing::PrintToString(verify().problems);
  ser["allow_symlinks"] = false;
  sign_statement(statement("model", ser, resources));
  EXPECT_EQ(verify().problems, Problems{"link.json: is a symlink, which the signature does not allow"});
  // Unsigned, it is one more file; a signed file behind a symlinked folder is not the signed one.
  sign();
  fs::create_symlink(dir_ / "sub", dir_ / "sublink");
  EXPECT_EQ(verify().problems, (Problems{"link.json: present but not in the signature",
                                         "sublink: present but not in the signature"}));
  resources = file_resources(dir_, {".git"});
  resources.push_back(resource("sublink/tokenizer.json", sha256_file((dir_ / "sub" / "tokenizer.json").string())));
  sign_statement(statement("model", serialization({".git"}), resources));
  const ModelSigningReport r = verify();
  ASSERT_FALSE(r.problems.empty());
  EXPECT_TRUE(r.problems[0].starts_with("sublink/tokenizer.json: missing (sublink is a symlink")) << r.problems[0];
}

TEST_F(ModelSigning, ControlCharactersInNamesAreEscaped) {
  sign();
  write(dir_ / "evil\nname", "x");
  EXPECT_EQ(verify().problems, Problems{"evil\\x0aname: present but not in the signature"});
}

TEST_F(ModelSigning, MalformedBundlesThrow) {
  EXPECT_ERROR(error(), "no such file");
  EXPECT_ERROR(error_of_bundle_text("not json"), "not JSON");
  const std::string good = good_bundle().dump();
  EXPECT_ERROR(error_of_bundle_text(good.substr(0, good.size() / 2)), "not JSON");
  EXPECT_ERROR(error_of_bundle_text(""), "not JSON");
  EXPECT_ERROR(error_of_bundle_text("[]"), "bundle: expected an object, got array");
  EXPECT_ERROR(error_of_bundle_text(std::string(100000, '[') + std::string(100000, ']')), "expected an object");
  EXPECT_ERROR(error_of_bundle_text(std::string(100000, '[')), "not JSON");

  auto edited = [&](auto edit) {
    json b = good_bundle();
    edit(b);
    return error_of_bundle_text(b.dump());
  };
  EXPECT_ERROR(edited([](json& b) { b.erase("mediaType"); }), "bundle.mediaType: missing");
  EXPECT_ERROR(edited([](json& b) { b["mediaType"] = "text/plain"; }), "not a Sigstore bundle");
  EXPECT_ERROR(edited([](json& b) { b.erase("dsseEnvelope"); }), "bundle.dsseEnvelope: missing");
  EXPECT_ERROR(edited([](json& b) { b["dsseEnvelope"]["payload"] = 5; }),
               "dsseEnvelope.payload: expected a string, got number");
  EXPECT_ERROR(edited([](json& b) { b["dsseEnvelope"]["payload"] = "not base64!"; }), "payload: not base64");
  EXPECT_ERROR(edited([](json& b) { b["dsseEnvelope"]["payloadType"] = "application/json"; }),
               "payloadType is 'application/json', expected application/vnd.in-toto+json");
  EXPECT_ERROR(edited([](json& b) { b["dsseEnvelope"]["signatures"] = json::object(); }),
               "signatures: expected an array");
  EXPECT_ERROR(edited([](json& b) { b["dsseEnvelope"]["signatures"] = json::array(); }), "expected 1 to 16 signatures");
  EXPECT_ERROR(edited([](json& b) { b["dsseEnvelope"]["signatures"][0] = "sig"; }),
               "signatures[0]: expected an object, got string");
  EXPECT_ERROR(edited([](json& b) { b["dsseEnvelope"]["signatures"][0]["sig"] = "@@@@"; }), "sig: not base64");
}

TEST_F(ModelSigning, HugeSignatureFileThrows) {
  write(sig_, "");
  fs::resize_file(sig_, (64u << 20) + 1);  // sparse
  EXPECT_ERROR(error(), "at most 64 MiB");
  fs::remove(sig_);
  fs::create_directory(sig_);
  EXPECT_ERROR(error(), "not a regular file");
}

TEST_F(ModelSigning, MalformedStatementsThrow) {
  const json good = statement("model", serialization({".git"}), file_resources(dir_, {".git"}));
  auto edited = [&](auto edit) {
    json st = good;
    edit(st);  // the subject digest goes stale, but these throw before it is compared
    return error_of_statement(st);
  };
  auto renamed = [&](const std::string& name) {
    return edited([&](json& st) { st["predicate"]["resources"][0]["name"] = name; });
  };
  for (const char* bad :
       {"../x", "/etc/passwd", "a/../../x", "sub/./tokenizer.json", "sub//tokenizer.json", "sub/", ""})
    EXPECT_ERROR(renamed(bad), "is not a relative path inside the model folder");
  EXPECT_ERROR(edited([](json& st) {
                 json& resources = st["predicate"]["resources"];
                 resources[1]["name"] = resources[0]["name"];
               }),
               "is listed twice");
  EXPECT_ERROR(edited([](json& st) { st["predicate"]["resources"] = "all"; }),
               "predicate.resources: expected an array, got string");
  EXPECT_ERROR(edited([](json& st) { st["predicate"]["resources"][0]["digest"] = "abc"; }), "expected 64 hex digits");
  EXPECT_ERROR(edited([](json& st) { st["predicate"]["resources"][0]["algorithm"] = "md5"; }),
               "algorithm is 'md5', expected 'sha256'");
  EXPECT_ERROR(edited([](json& st) { st["predicateType"] = "https://example.com/x"; }), "predicateType is");
  EXPECT_ERROR(edited([](json& st) { st["predicateType"] = "https://model_signing/Digests/v0.1"; }),
               "a model-signing 0.2 signature");
  EXPECT_ERROR(edited([](json& st) { st["_type"] = "https://in-toto.io/Statement/v0.1"; }), "_type is");
  EXPECT_ERROR(edited([](json& st) { st["predicate"]["serialization"]["method"] = "tensors"; }),
               "method 'tensors' is unknown");
  EXPECT_ERROR(edited([](json& st) { st["predicate"]["serialization"]["hash_type"] = "blake3"; }),
               "hash_type 'blake3' is not supported");
  EXPECT_ERROR(edited([](json& st) { st["predicate"]["serialization"].erase("allow_symlinks"); }),
               "serialization.allow_symlinks: missing");
  EXPECT_ERROR(edited([](json& st) { st["predicate"]["serialization"]["ignore_paths"] = ".git"; }),
               "ignore_paths: expected an array");
  EXPECT_ERROR(edited([](json& st) { st["subject"].push_back(st["subject"][0]); }), "expected one subject, got 2");
  EXPECT_ERROR(edited([](json& st) { st.erase("predicate"); }), "statement.predicate: missing");
  sign_payload("garbage");
  EXPECT_ERROR(error(), "DSSE payload: not JSON");
}

TEST_F(ModelSigning, MissingModelThrows) {
  sign();
  EXPECT_THROW(verify_model_signing((base_ / "nope").string(), sig_.string(), *pub_), Error);
}

}  // namespace
}  // namespace zen::attest
