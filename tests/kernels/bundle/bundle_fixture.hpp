// Test bundles: a directory holding the C kernels of acme_kernels.c as its
// shared object, a manifest naming them under a prefix of the test's
// choosing (kernel names are process-wide), and a signature.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <variant>

#include "devices/gpu/bundle_isolation.hpp"
#include "kernels/bundle/bundle.hpp"
#include "kernels/bundle/loader.hpp"
#include "kernels/bundle/signing.hpp"
#include "tests/runtime_fixture.hpp"

namespace cohort::test {

/// A file the build made next to the test program: at `path` as the build
/// saw it, or (a build unpacked elsewhere, as on a GPU machine) next to
/// the running program under the same name.
inline std::string built_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || fs::exists(path, ec))
    return path;
  auto here = fs::read_symlink("/proc/self/exe", ec).parent_path();
  auto near = here / fs::path{path}.filename();
  return fs::exists(near, ec) ? near.string() : path;
}

/// The refusal a load returned; fails the test when it loaded.
inline kernels::bundle::refused
refusal_of(const std::variant<kernels::bundle::loaded_bundle,
                              kernels::bundle::refused>& r) {
  if (auto* ok = std::get_if<kernels::bundle::loaded_bundle>(&r))
    FAIL("loaded " << ok->name << ", expected a refusal");
  return std::get<kernels::bundle::refused>(r);
}

/// The bundle a load returned; fails the test, saying why, when it was
/// refused.
inline kernels::bundle::loaded_bundle
loaded_of(const std::variant<kernels::bundle::loaded_bundle,
                             kernels::bundle::refused>& r) {
  if (auto* no = std::get_if<kernels::bundle::refused>(&r))
    FAIL("refused (" << to_string(no->reason) << "): " << no->detail);
  return std::get<kernels::bundle::loaded_bundle>(r);
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream{path, std::ios::binary | std::ios::trunc} << bytes;
}

/// The manifest's kernels: PREFIX.scale_add (f64 x, y -> f64, alpha * x +
/// y, x and y of one length), PREFIX.histogram (u8 -> 256 i64 bins) and
/// PREFIX.checked_sum (i32 -> one i64; fails on a negative value).
inline std::string acme_kernels_text(const std::string& prefix) {
  return R"(kernel {
  name: ")" +
         prefix + R"(.scale_add"
  input { name: "x" dtype: "f64" }
  input { name: "y" dtype: "f64" }
  output { name: "z" dtype: "f64" }
  scalar: "alpha"
  output_size: "x"
  require: "x == y"
  flops: "2 * x"
  cpu_blob: "cpu/libacme.so"
  cpu_symbol: "acme_scale_add"
}
kernel {
  name: ")" +
         prefix + R"(.histogram"
  input { name: "bytes" dtype: "u8" }
  output { name: "bins" dtype: "i64" }
  output_size: "256"
  cpu_blob: "cpu/libacme.so"
  cpu_symbol: "acme_histogram"
}
kernel {
  name: ")" +
         prefix + R"(.checked_sum"
  input { name: "values" dtype: "i32" }
  output { dtype: "i64" }
  output_size: "1"
  require: "values > 0"
  cpu_blob: "cpu/libacme.so"
  cpu_symbol: "acme_checked_sum"
}
)";
}

/// A bundle in `dir`: the shared object at cpu/libacme.so, a manifest
/// (name `name`, kernels `kernels`, blob digest and size filled in) and,
/// when `key` is given, manifest.sig.
/// `so_file` replaces the acme shared object when given.
inline void make_bundle(const std::string& dir, const std::string& name,
                        const std::string& kernels,
                        const kernels::bundle::private_key* key,
                        const std::string& so_file = COHORT_ACME_KERNELS) {
  namespace fs = std::filesystem;
  fs::create_directories(fs::path{dir} / "cpu");
  auto so = read_bytes(built_file(so_file));
  REQUIRE(!so.empty());
  write_bytes(dir + "/cpu/libacme.so", so);
  auto digest = kernels::bundle::to_hex(kernels::bundle::sha256(
      {reinterpret_cast<const uint8_t*>(so.data()), so.size()}));
  auto manifest = "name: \"" + name + "\"\nversion: \"1.0.0\"\n" +
                  "blob { path: \"cpu/libacme.so\" sha256: \"" + digest +
                  "\" size: " + std::to_string(so.size()) +
                  " kind: CPU_SHARED_OBJECT }\n" + kernels;
  write_bytes(dir + "/manifest.textproto", manifest);
  if (key != nullptr) {
    auto sig = kernels::bundle::sign_bundle(dir, *key);
    REQUIRE(std::holds_alternative<pb::BundleSignature>(sig));
    write_bytes(dir + "/manifest.sig", kernels::bundle::signature_text(
                                           std::get<pb::BundleSignature>(sig)));
  }
}

/// Adds a blob to the bundle in `dir`: the file at `path` (inside it) and
/// its line in the manifest (before the kernels). Sign afterwards.
inline void add_blob(const std::string& dir, const std::string& path,
                     const std::string& bytes, const std::string& kind) {
  auto file = std::filesystem::path{dir} / path;
  std::filesystem::create_directories(file.parent_path());
  write_bytes(file, bytes);
  auto m = read_bytes(dir + "/manifest.textproto");
  auto digest = kernels::bundle::to_hex(kernels::bundle::sha256(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}));
  m.insert(m.find("kernel {"),
           "blob { path: \"" + path + "\" sha256: \"" + digest + "\" size: " +
               std::to_string(bytes.size()) + " kind: " + kind + " }\n");
  write_bytes(dir + "/manifest.textproto", m);
}

/// Loads the bundle in `dir` as a node of this process would: in
/// isolation first, through the helper and plugins the node finds. Without
/// `gpus`, GPU code is not probed (a test bundle's stand-in PTX would fail
/// a real driver's JIT).
inline std::variant<kernels::bundle::loaded_bundle, kernels::bundle::refused>
load_here(const std::string& dir, const kernels::bundle::trust_store& trust,
          bool gpus = true) {
  auto iso = devices::gpu::bundle_isolation();
  if (!gpus)
    iso.plugins.clear();
  return kernels::bundle::load_bundle(dir, trust, iso);
}

/// A public key file for `key` in `dir`; returns its path.
inline std::string write_public_key(const temp_dir& dir,
                                    const kernels::bundle::private_key& key,
                                    const std::string& name = "signer.pub") {
  auto path = dir.file(name);
  write_bytes(path, key.public_key().to_pem());
  return path;
}

} // namespace cohort::test
