#include "tools/kernel_command.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "config/compile.hpp"
#include "devices/gpu/bundle_isolation.hpp"
#include "kernels/bundle/loader.hpp"
#include "kernels/bundle/signing.hpp"
#include "kernels/registry.hpp"
#include "messages/convert.hpp"
#include "messages/errc.hpp"
#include "messages/json.hpp"

namespace cohort::tools {

namespace {

int kernel_bad_input(const std::string& msg) {
  std::fprintf(stderr, "cohort: kernel: %s\n", msg.c_str());
  return exit_bad_input;
}

// Writes `text` to a new file `path` with `mode`; never replaces a file.
std::string write_new(const std::string& path, const std::string& text,
                      mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    return "cannot create '" + path + "': " + std::strerror(errno) +
           (errno == EEXIST ? " (keys are never overwritten)" : "");
  size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      auto why = std::string{std::strerror(errno)};
      ::close(fd);
      ::unlink(path.c_str());
      return "cannot write '" + path + "': " + why;
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(path.c_str());
    return "cannot write '" + path + "': " + std::strerror(errno);
  }
  return {};
}

int cmd_keygen(const std::string& prefix, std::FILE* out) {
  auto key = kernels::bundle::private_key::generate();
  if (!key)
    return kernel_bad_input("keygen: " + describe(key.error()));
  auto priv = prefix + ".key";
  auto pub = prefix + ".pub";
  if (auto why = write_new(priv, key->to_pem(), 0600); !why.empty())
    return kernel_bad_input("keygen: " + why);
  if (auto why = write_new(pub, key->public_key().to_pem(), 0644);
      !why.empty()) {
    ::unlink(priv.c_str());
    return kernel_bad_input("keygen: " + why);
  }
  std::fprintf(out,
               "key %s\n  private %s (mode 0600: keep it secret)\n"
               "  public  %s (list it in the runtime config's trusted "
               "keys)\n",
               key->public_key().id().c_str(), priv.c_str(), pub.c_str());
  return 0;
}

// Reads a small file (a key): at most 64 KiB.
caf::expected<std::string> read_small(const std::string& path) {
  auto* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    return make_error(errc::invalid_arguments,
                      "cannot open '" + path + "': " + std::strerror(errno));
  std::string out(64 << 10, '\0');
  auto n = std::fread(out.data(), 1, out.size(), f);
  bool more = std::fgetc(f) != EOF;
  std::fclose(f);
  if (more)
    return make_error(errc::invalid_arguments,
                      "'" + path + "' is larger than 64 KiB: not a key");
  out.resize(n);
  return out;
}

int cmd_sign(const std::string& dir, const std::string& key_path,
             std::FILE* out) {
  auto pem = read_small(key_path);
  if (!pem)
    return kernel_bad_input("sign: " + describe(pem.error()));
  auto key = kernels::bundle::private_key::from_pem(*pem);
  if (!key)
    return kernel_bad_input("sign: " + key_path + ": " + describe(key.error()));
  auto sig = kernels::bundle::sign_bundle(dir, *key);
  if (auto* no = std::get_if<kernels::bundle::refused>(&sig))
    return kernel_bad_input("sign: not signed (" +
                            std::string{to_string(no->reason)} +
                            "): " + no->detail);
  // A new signature replaces the old one whole, or not at all.
  auto path = dir + "/" + kernels::bundle::signature_file;
  auto tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  auto text =
      kernels::bundle::signature_text(std::get<pb::BundleSignature>(sig));
  if (auto why = write_new(tmp, text, 0644); !why.empty())
    return kernel_bad_input("sign: " + why);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    auto why = std::string{std::strerror(errno)};
    ::unlink(tmp.c_str());
    return kernel_bad_input("sign: cannot replace '" + path + "': " + why);
  }
  auto manifest = kernels::bundle::read_manifest(dir);
  std::fprintf(
      out, "signed %s with key %s (manifest SHA-256 %s)\n", dir.c_str(),
      key->public_key().id().c_str(),
      std::holds_alternative<kernels::bundle::manifest_bytes>(manifest)
          ? std::get<kernels::bundle::manifest_bytes>(manifest).sha256.c_str()
          : "?");
  return 0;
}

// The trust of `verify`: the config's kernel_bundles settings, then the
// command line's; `timeout` becomes the config's load timeout, if it sets
// one.
caf::expected<kernels::bundle::trust_store>
trust_of(const kernel_cli& k, std::chrono::milliseconds& timeout) {
  pb::KernelBundles kb;
  if (!k.config.empty()) {
    auto cfg = load_config(k.config);
    if (!cfg)
      return cfg.error();
    if (auto err = config::check_config(*cfg))
      return make_error(errc::malformed_config,
                        k.config + ": " + describe(err));
    kb = cfg->kernel_bundles();
    if (kb.load_timeout_ms() != 0)
      timeout = std::chrono::milliseconds{kb.load_timeout_ms()};
  }
  for (auto& t : k.trusted)
    kb.add_trusted_key(t);
  for (auto& r : k.revoked_keys)
    kb.add_revoked_key(r);
  for (auto& r : k.revoked_bundles)
    kb.add_revoked_bundle(r);
  return kernels::bundle::trust_from_config(kb);
}

int cmd_verify(const kernel_cli& k, std::FILE* out) {
  auto timeout = kernels::bundle::default_probe_timeout;
  auto trust = trust_of(k, timeout);
  if (!trust)
    return kernel_bad_input("verify: " + describe(trust.error()));
  auto r = kernels::bundle::load_bundle(
      k.bundle, *trust, devices::gpu::bundle_isolation(timeout));
  if (auto* no = std::get_if<kernels::bundle::refused>(&r)) {
    std::fprintf(stderr, "cohort: kernel: verify: refused (%s): %s\n",
                 to_string(no->reason), no->detail.c_str());
    return exit_failed;
  }
  auto& b = std::get<kernels::bundle::loaded_bundle>(r);
  std::string names;
  for (auto& [n, id] : b.kernels)
    names += (names.empty() ? "" : ", ") + n;
  std::string loaded;
  for (auto& l : b.probed.loaded)
    loaded += (loaded.empty() ? "" : ", ") + l;
  std::fprintf(out,
               "verified %s %s (%s): signed by key %s, manifest SHA-256 %s, "
               "every blob matches its digest, its code loads in isolation "
               "(%s); kernels: %s\n",
               b.name.c_str(), b.version.c_str(), k.bundle.c_str(),
               b.key_id.c_str(), b.manifest_sha256.c_str(), loaded.c_str(),
               names.c_str());
  for (auto& note : b.probed.notes)
    std::fprintf(out, "  not checked: %s\n", note.c_str());
  return 0;
}

const char* blob_kind(pb::BundleBlob::Kind k) {
  switch (k) {
  case pb::BundleBlob::CPU_SHARED_OBJECT:
    return "cpu_shared_object";
  case pb::BundleBlob::CUDA_PTX:
    return "cuda_ptx";
  case pb::BundleBlob::CUDA_CUBIN:
    return "cuda_cubin";
  case pb::BundleBlob::CUDA_FATBIN:
    return "cuda_fatbin";
  case pb::BundleBlob::HIP_CODE_OBJECT:
    return "hip_code_object";
  default:
    return "unspecified";
  }
}

// What a bundle holds, trusting nobody: its manifest, who signed it, and
// whether each blob matches its digest.
int cmd_inspect(const std::string& dir, bool json, std::FILE* out) {
  namespace kb = kernels::bundle;
  auto mf = kb::read_manifest(dir);
  if (auto* no = std::get_if<kb::refused>(&mf))
    return kernel_bad_input("inspect: " + no->detail);
  auto& manifest = std::get<kb::manifest_bytes>(mf);
  auto parsed = kb::parse_manifest(manifest.text);
  if (auto* no = std::get_if<kb::refused>(&parsed))
    return kernel_bad_input("inspect: " + dir + ": " + no->detail);
  auto& m = std::get<pb::KernelBundle>(parsed);
  auto sf = kb::read_signature(dir);
  std::string signer = "unsigned";
  if (auto* no = std::get_if<kb::refused>(&sf))
    signer = "unreadable signature: " + no->detail;
  else if (auto& sig = std::get<std::optional<pb::BundleSignature>>(sf))
    signer = "key " + sig->key_id();
  std::vector<std::string> blob_status;
  bool all_match = true;
  for (auto& b : m.blob()) {
    auto bytes = kb::read_blob(dir, b);
    auto* no = std::get_if<kb::refused>(&bytes);
    blob_status.push_back(no == nullptr ? "matches" : no->detail);
    all_match = all_match && no == nullptr;
  }
  if (json) {
    std::fprintf(out,
                 "{\"name\":%s,\"version\":%s,\"manifest_sha256\":\"%s\","
                 "\"signed_by\":%s,\"blobs_match\":%s,\"blobs\":[",
                 json_string(m.name()).c_str(),
                 json_string(m.version()).c_str(), manifest.sha256.c_str(),
                 json_string(signer).c_str(), all_match ? "true" : "false");
    for (int i = 0; i < m.blob_size(); ++i) {
      auto& b = m.blob(i);
      std::fprintf(out,
                   "%s{\"path\":%s,\"kind\":\"%s\",\"size\":%llu,"
                   "\"sha256\":%s,\"status\":%s}",
                   i == 0 ? "" : ",", json_string(b.path()).c_str(),
                   blob_kind(b.kind()), (unsigned long long)b.size(),
                   json_string(b.sha256()).c_str(),
                   json_string(blob_status[size_t(i)]).c_str());
    }
    std::fprintf(out, "],\"kernels\":[");
    for (int i = 0; i < m.kernel_size(); ++i) {
      auto& k = m.kernel(i);
      std::string ins;
      for (auto& in : k.input())
        ins += std::string{ins.empty() ? "" : ","} +
               "{\"name\":" + json_string(in.name()) +
               ",\"dtype\":" + json_string(in.dtype()) + "}";
      std::fprintf(out,
                   "%s{\"name\":%s,\"inputs\":[%s],\"output\":%s,"
                   "\"output_size\":%s,\"cpu\":%s,\"cuda\":%s,\"hip\":%s}",
                   i == 0 ? "" : ",", json_string(k.name()).c_str(),
                   ins.c_str(), json_string(k.output().dtype()).c_str(),
                   json_string(k.output_size()).c_str(),
                   json_string(k.cpu_blob() + ":" + k.cpu_symbol()).c_str(),
                   k.cuda().blob().empty() ? "false" : "true",
                   k.hip().blob().empty() ? "false" : "true");
    }
    std::fprintf(out, "]}\n");
    return 0;
  }
  std::fprintf(out,
               "bundle %s %s (%s)\n  manifest SHA-256 %s\n  signed by %s "
               "(not checked against any trust: `cohort kernel verify` does)\n"
               "blobs:\n",
               m.name().c_str(), m.version().c_str(), dir.c_str(),
               manifest.sha256.c_str(), signer.c_str());
  for (int i = 0; i < m.blob_size(); ++i) {
    auto& b = m.blob(i);
    std::fprintf(out, "  %-32s %-17s %10llu bytes  %s\n", b.path().c_str(),
                 blob_kind(b.kind()), (unsigned long long)b.size(),
                 blob_status[size_t(i)].c_str());
  }
  std::fprintf(out, "kernels:\n");
  for (auto& k : m.kernel()) {
    std::string ins;
    for (auto& in : k.input())
      ins += (ins.empty() ? "" : ", ") + in.name() + ":" + in.dtype();
    std::fprintf(out, "  %s(%s) -> %s[%s]  cpu %s:%s%s%s\n", k.name().c_str(),
                 ins.c_str(), k.output().dtype().c_str(),
                 k.output_size().c_str(), k.cpu_blob().c_str(),
                 k.cpu_symbol().c_str(),
                 k.cuda().blob().empty() ? "" : "  cuda",
                 k.hip().blob().empty() ? "" : "  hip");
    for (auto& r : k.require())
      std::fprintf(out, "      require %s\n", r.c_str());
  }
  return 0;
}

// `list --config FILE`: the config's bundles load first, as a node would
// load them (refusals reported, not fatal).
int load_config_bundles(const std::string& path) {
  auto cfg = load_config(path);
  if (!cfg)
    return kernel_bad_input("list: " + describe(cfg.error()));
  auto settings = config::compile(*cfg);
  if (!settings)
    return kernel_bad_input("list: " + path + ": " +
                            describe(settings.error()));
  auto iso = devices::gpu::bundle_isolation(settings->bundle_load_timeout);
  iso.cpu_in_process = settings->bundle_cpu_in_process;
  iso.host_memory_limit = settings->bundle_host_memory;
  for (auto& dir : settings->bundles) {
    auto r = kernels::bundle::load_bundle(dir, *settings->trust, iso);
    if (auto* no = std::get_if<kernels::bundle::refused>(&r))
      std::fprintf(stderr, "cohort: kernel: list: bundle %s refused (%s): %s\n",
                   dir.c_str(), to_string(no->reason), no->detail.c_str());
  }
  return 0;
}

std::string params(const std::vector<kernels::buffer_param>& ps) {
  std::string out;
  for (auto& p : ps)
    out += (out.empty() ? "" : ", ") + p.name + ":" +
           std::string{kernels::name(p.type)};
  return out;
}

int cmd_list(bool json, std::FILE* out) {
  auto all = kernels::registered_kernels();
  // Columns as wide as their longest entry.
  int name_w = 6, inputs_w = 6, output_w = 6;
  for (auto& k : all) {
    name_w = std::max(name_w, int(k.name.size()));
    inputs_w = std::max(inputs_w, int(params(k.signature.inputs).size()));
    output_w = std::max(output_w, int(params({k.signature.output}).size()));
  }
  if (!json)
    std::fprintf(out, "%-*s %-*s %-*s %-9s %s\n", name_w, "KERNEL", inputs_w,
                 "INPUTS", output_w, "OUTPUT", "GPU CODE", "ORIGIN");
  for (auto& k : all) {
    auto& sig = k.signature;
    auto gpu = std::string{k.cuda ? "cuda" : ""} +
               (k.cuda && k.hip ? "," : "") + (k.hip ? "hip" : "");
    if (json) {
      std::string ins;
      for (auto& p : sig.inputs)
        ins += std::string{ins.empty() ? "" : ","} +
               "{\"name\":" + json_string(p.name) + ",\"dtype\":\"" +
               std::string{kernels::name(p.type)} + "\"}";
      std::string scalars;
      for (auto& s : sig.scalars)
        scalars += (scalars.empty() ? "" : ",") + json_string(s);
      std::fprintf(
          out,
          "{\"name\":%s,\"id\":%d,\"builtin\":%s,\"origin\":%s,\"inputs\":[%s],"
          "\"output\":{\"name\":%s,\"dtype\":\"%s\"},\"scalars\":[%s],"
          "\"cuda\":%s,\"hip\":%s}\n",
          json_string(k.name).c_str(), int(k.id), k.builtin ? "true" : "false",
          json_string(k.origin).c_str(), ins.c_str(),
          json_string(sig.output.name).c_str(),
          std::string{kernels::name(sig.output.type)}.c_str(), scalars.c_str(),
          k.cuda ? "true" : "false", k.hip ? "true" : "false");
      continue;
    }
    std::fprintf(out, "%-*s %-*s %-*s %-9s %s\n", name_w, k.name.c_str(),
                 inputs_w, params(sig.inputs).c_str(), output_w,
                 params({sig.output}).c_str(), gpu.empty() ? "-" : gpu.c_str(),
                 k.origin.c_str());
  }
  return 0;
}

} // namespace

int run_kernel(const kernel_cli& k, std::FILE* out) {
  if (parsed(k.keygen))
    return cmd_keygen(k.prefix, out);
  if (parsed(k.sign))
    return cmd_sign(k.bundle, k.key, out);
  if (parsed(k.verify))
    return cmd_verify(k, out);
  if (parsed(k.inspect))
    return cmd_inspect(k.bundle, k.json, out);
  if (!k.config.empty())
    if (int rc = load_config_bundles(k.config); rc != 0)
      return rc;
  return cmd_list(k.json, out);
}

} // namespace cohort::tools
