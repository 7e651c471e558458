// Signed kernel bundles (docs/kernels.md, "Signed bundles"): reading a
// bundle directory, checking its signature and digests against the keys a
// node trusts, signing one. Loading a checked bundle's kernels is
// loader.hpp's job.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <caf/expected.hpp>

#include "kernels/bundle/signing.hpp"
#include "messages/bundle.pb.h"
#include "messages/cohort.pb.h"

namespace cohort::kernels::bundle {

/// The manifest's and the signature's file names in a bundle directory.
inline constexpr const char* manifest_file = "manifest.textproto";
inline constexpr const char* signature_file = "manifest.sig";

/// Limits on what a bundle may hold: a bundle is input from outside, and
/// reading it must not exhaust the node's memory.
inline constexpr uint64_t max_manifest_bytes = 1 << 20;
inline constexpr uint64_t max_blob_bytes = uint64_t{512} << 20;
inline constexpr uint64_t max_bundle_bytes = uint64_t{2} << 30;
inline constexpr int max_blobs = 64;
inline constexpr int max_bundle_kernels = 64;

/// Why a bundle was refused: the `reason` label of
/// cohort_kernel_bundle_refusals_total and the word in audit records.
enum class refusal : uint8_t {
  /// A file is missing, unreadable, too large, or a symbolic link.
  unreadable,
  /// The manifest or the signature file does not parse or breaks a rule.
  malformed,
  /// No manifest.sig.
  unsigned_bundle,
  /// Signed by a key the node does not trust.
  unknown_key,
  /// Signed by a revoked key.
  revoked_key,
  /// The manifest's digest is on the revoked list.
  revoked_bundle,
  /// The signature does not verify: the manifest was changed after signing.
  bad_signature,
  /// A blob's size or digest differs from the manifest's.
  tampered_blob,
  /// Verified, but its code did not load (a shared object or symbol
  /// missing, GPU code the driver refused, no isolated loader).
  load_failed,
  /// A kernel's name is taken by another kernel, or the registry is full.
  conflict,
  /// Loading its code in isolation crashed the child process
  /// (isolation.hpp): the node did not load it.
  load_crashed,
  /// Loading its code in isolation did not finish within the timeout; the
  /// child was killed.
  load_hung,
};

inline constexpr unsigned refusal_count = 12;

/// "unreadable", "malformed", "unsigned", "unknown_key", ...
const char* to_string(refusal r);

/// A bundle refused: why, and what exactly was wrong.
struct refused {
  refusal reason = refusal::malformed;
  std::string detail;
};

/// What a node trusts: keys that may sign bundles, revoked keys, revoked
/// bundles. Empty: every bundle is refused (unknown_key).
struct trust_store {
  std::vector<public_key> keys;
  std::set<std::string> revoked_keys;
  std::set<std::string> revoked_bundles;

  /// The trusted, not revoked, key with id `id`; null when none.
  const public_key* find(const std::string& id) const;
};

/// Reads the trust settings of a runtime config (its PEM key files);
/// malformed_config naming the setting when one is wrong.
caf::expected<trust_store> trust_from_config(const pb::KernelBundles& cfg);

/// A bundle's manifest as read, before any trust decision.
struct manifest_bytes {
  std::string text;
  /// SHA-256 of `text`, in hex: what revocation and audit records name.
  std::string sha256;
};

/// Reads `dir`'s manifest file (at most max_manifest_bytes, no symbolic
/// link).
std::variant<manifest_bytes, refused> read_manifest(const std::string& dir);

/// Reads `dir`'s signature file; an empty optional when there is none.
std::variant<std::optional<pb::BundleSignature>, refused>
read_signature(const std::string& dir);

/// Parses a manifest and checks its rules: names, paths, kinds, dtypes,
/// expressions, references between kernels and blobs.
std::variant<pb::KernelBundle, refused> parse_manifest(const std::string& text);

/// Reads one blob and checks its size and digest.
std::variant<std::string, refused> read_blob(const std::string& dir,
                                             const pb::BundleBlob& blob);

/// A bundle whose signature, trust and digests all checked.
struct checked_bundle {
  std::string dir;
  pb::KernelBundle manifest;
  std::string manifest_sha256;
  std::string key_id;
  /// Blob contents by path.
  std::map<std::string, std::string> blobs;
};

/// Reads the bundle in `dir` and checks it against `trust`, in an order
/// that trusts nothing early: the signature over the manifest's bytes
/// before the manifest is parsed, every blob's digest before it is used.
std::variant<checked_bundle, refused> check_bundle(const std::string& dir,
                                                   const trust_store& trust);

/// Signs the manifest in `dir` with `key` after checking that it parses
/// and that every blob matches its digest; returns what manifest.sig must
/// hold (the caller writes it).
std::variant<pb::BundleSignature, refused> sign_bundle(const std::string& dir,
                                                       const private_key& key);

/// manifest.sig's text for `sig`.
std::string signature_text(const pb::BundleSignature& sig);

} // namespace cohort::kernels::bundle
