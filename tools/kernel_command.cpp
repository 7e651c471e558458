#include "tools/kernel_command.hpp"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include "kernels/bundle/signing.hpp"
#include "kernels/registry.hpp"
#include "messages/errc.hpp"

namespace cohort::tools {

namespace {

int bad_input(const std::string& msg) {
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
    return bad_input("keygen: " + describe(key.error()));
  auto priv = prefix + ".key";
  auto pub = prefix + ".pub";
  if (auto why = write_new(priv, key->to_pem(), 0600); !why.empty())
    return bad_input("keygen: " + why);
  if (auto why = write_new(pub, key->public_key().to_pem(), 0644);
      !why.empty()) {
    ::unlink(priv.c_str());
    return bad_input("keygen: " + why);
  }
  std::fprintf(out,
               "key %s\n  private %s (mode 0600: keep it secret)\n"
               "  public  %s (list it in the runtime config's trusted "
               "keys)\n",
               key->public_key().id().c_str(), priv.c_str(), pub.c_str());
  return 0;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
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
  if (!json)
    std::fprintf(out, "%-22s %-40s %-18s %-9s %s\n", "KERNEL", "INPUTS",
                 "OUTPUT", "GPU CODE", "ORIGIN");
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
    std::fprintf(out, "%-22s %-40s %-18s %-9s %s\n", k.name.c_str(),
                 params(sig.inputs).c_str(), params({sig.output}).c_str(),
                 gpu.empty() ? "-" : gpu.c_str(), k.origin.c_str());
  }
  return 0;
}

} // namespace

void add_kernel_command(CLI::App& parent, kernel_cli& k) {
  auto* kernel = parent.add_subcommand(
      "kernel", "kernels and signing keys for kernel bundles");
  kernel->require_subcommand(1, 1);
  k.keygen = kernel->add_subcommand(
      "keygen", "make an Ed25519 signing key pair: PREFIX.key (private, "
                "mode 0600) and PREFIX.pub; prints the key id");
  k.keygen->add_option("PREFIX", k.prefix, "where the two files go")
      ->required();
  k.list = kernel->add_subcommand(
      "list", "the kernels of the registry: name, typed inputs and output, "
              "GPU code, origin");
  k.list->add_flag("--json", k.json, "one JSON object per kernel and line");
}

int run_kernel(const kernel_cli& k, std::FILE* out) {
  if (k.keygen->parsed())
    return cmd_keygen(k.prefix, out);
  return cmd_list(k.json, out);
}

int run_kernel(const std::vector<std::string>& args, std::FILE* out) {
  CLI::App app{"", "cohort"};
  kernel_cli k;
  add_kernel_command(app, k);
  std::vector<std::string> words{"kernel"};
  words.insert(words.end(), args.begin(), args.end());
  if (auto done = parse_cli(app, words, out))
    return *done;
  return run_kernel(k, out);
}

} // namespace cohort::tools
