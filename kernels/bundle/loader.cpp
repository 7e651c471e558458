#include "kernels/bundle/loader.hpp"

#include <memory>
#include <mutex>

#include <dlfcn.h>
#include <unistd.h>

#include "cohort/kernel_abi.h"
#include "ipc/child.hpp"
#include "kernels/bundle/kernel_host.hpp"
#include "kernels/bundle/rule.hpp"
#include "kernels/registry.hpp"

namespace cohort::kernels::bundle {

namespace {

static_assert(int(dtype::f32) == COHORT_F32 && int(dtype::f64) == COHORT_F64 &&
              int(dtype::i32) == COHORT_I32 && int(dtype::i64) == COHORT_I64 &&
              int(dtype::u8) == COHORT_U8);

// Loads a shared object from memory: written to an anonymous file
// (memfd), opened through /proc/self/fd. The bytes are the ones whose
// digest was checked; reading the file again could load other bytes.
void* open_shared_object(const std::string& bundle, const std::string& path,
                         const std::string& bytes, std::string& why) {
  auto label = "cohort-bundle:" + bundle + ":" + path;
  int fd = ipc::memory_file(label.c_str(), bytes, why);
  if (fd < 0) {
    why = "blob '" + path + "': " + why;
    return nullptr;
  }
  auto where = "/proc/self/fd/" + std::to_string(fd);
  void* handle = ::dlopen(where.c_str(), RTLD_NOW | RTLD_LOCAL);
  ::close(fd);
  if (handle == nullptr) {
    auto* err = ::dlerror();
    why = "blob '" + path +
          "' does not load: " + (err != nullptr ? err : "dlopen failed");
  }
  return handle;
}

struct kernel_rules {
  std::string name;
  rule output_size;
  std::vector<rule> require;
  std::optional<rule> flops;
  /// The GPU launches' thread counts (CUDA, HIP), when the manifest gives
  /// them.
  std::optional<rule> threads[2];
};

// The checks of one call, as the registry's `check` returns them.
std::string check_call(const kernel_rules& r, const kernel_args& a,
                       input_lengths in) {
  std::string why;
  for (auto& req : r.require) {
    auto v = req.eval(a, in, why);
    if (!v)
      return r.name + ": " + why;
    if (*v == 0)
      return r.name + ": require '" + req.text() + "' does not hold";
  }
  auto out = r.output_size.eval(a, in, why);
  if (!out)
    return r.name + ": output_size: " + why;
  if (*out < 0)
    return r.name + ": output_size '" + r.output_size.text() + "' is " +
           std::to_string(*out) + ", negative";
  // A launch rule that cannot be evaluated would launch nothing and return
  // zeros: refused here, at admission, instead.
  for (auto& t : r.threads) {
    if (!t)
      continue;
    auto n = t->eval(a, in, why);
    if (!n)
      return r.name + ": threads: " + why;
    if (*n < 0)
      return r.name + ": threads '" + t->text() + "' is " + std::to_string(*n) +
             ", negative";
  }
  return {};
}

// The GPU code of one backend: the checked blob's bytes (PTX gets the NUL
// the driver reads it up to), the entry point, the launch rule.
gpu_code gpu_code_of(const pb::BundleGpuCode& g, const checked_bundle& b,
                     const std::shared_ptr<kernel_rules>& rules, int backend) {
  gpu_code c;
  if (g.blob().empty())
    return c;
  for (auto& blob : b.manifest.blob()) {
    if (blob.path() != g.blob())
      continue;
    switch (blob.kind()) {
    case pb::BundleBlob::CUDA_PTX:
      c.kind = gpu_code::format::ptx;
      break;
    case pb::BundleBlob::CUDA_CUBIN:
      c.kind = gpu_code::format::cubin;
      break;
    case pb::BundleBlob::CUDA_FATBIN:
      c.kind = gpu_code::format::fatbin;
      break;
    default:
      c.kind = gpu_code::format::hip_code_object;
    }
  }
  auto& bytes = b.blobs.at(g.blob());
  auto image =
      std::make_shared<std::vector<uint8_t>>(bytes.begin(), bytes.end());
  if (c.kind == gpu_code::format::ptx && image->back() != 0)
    image->push_back(0);
  c.image = std::move(image);
  c.function = g.function();
  c.block = g.block() == 0 ? 256 : g.block();
  if (rules->threads[backend])
    c.launch_elements = [rules, backend](const kernel_args& a,
                                         input_lengths in) {
      std::string why;
      auto v = rules->threads[backend]->eval(a, in, why);
      return v && *v > 0 ? uint64_t(*v) : uint64_t{0};
    };
  return c;
}

// A bundle kernel's CPU code: `fn` called in this process (IN_PROCESS),
// or kernel `index` of `hosts` in a kernel host process.
struct cpu_code {
  cohort_cpu_kernel fn = nullptr;
  std::shared_ptr<kernel_hosts> hosts;
  uint32_t index = 0;
};

kernel_output call_in_process(const kernel_rules& r, cohort_cpu_kernel fn,
                              const kernel_args& a, typed_inputs in,
                              kernel_output out) {
  small_vector<cohort_buffer, 8> bufs;
  for (auto& v : in)
    bufs.push_back({v.data, v.size, int32_t(v.type)});
  char err[512] = "";
  cohort_kernel_call call{};
  call.abi_version = COHORT_KERNEL_ABI_VERSION;
  call.input_count = uint32_t(bufs.size());
  call.inputs = bufs.data();
  call.output = out.type == dtype::f32 ? static_cast<void*>(out.values.data())
                                       : static_cast<void*>(out.raw.data());
  call.output_length = out.elements();
  call.output_dtype = int32_t(out.type);
  call.alpha = a.alpha;
  call.m = a.m;
  call.n = a.n;
  call.k = a.k;
  call.top_k = a.top_k;
  call.error = err;
  call.error_size = sizeof err;
  if (int rc = fn(&call); rc != 0) {
    err[sizeof err - 1] = '\0';
    throw kernel_failure(r.name + ": " +
                         (err[0] != '\0'
                              ? std::string{err}
                              : "failed with code " + std::to_string(rc)));
  }
  return out;
}

kernel_def make_def(const pb::BundleKernel& k, cpu_code code,
                    const checked_bundle& b) {
  kernel_def d;
  d.name = k.name();
  std::vector<std::string> names;
  for (auto& in : k.input()) {
    d.signature.inputs.push_back({in.name(), *parse_dtype(in.dtype())});
    names.push_back(in.name());
  }
  d.signature.output = {k.output().name().empty() ? "out" : k.output().name(),
                        *parse_dtype(k.output().dtype())};
  d.signature.scalars.assign(k.scalar().begin(), k.scalar().end());
  // parse_manifest parsed every rule already: these parses cannot fail.
  std::string why;
  auto rules = std::make_shared<kernel_rules>(kernel_rules{
      k.name(), *rule::parse(k.output_size(), names, why), {}, {}});
  for (auto& r : k.require())
    rules->require.push_back(*rule::parse(r, names, why));
  if (!k.flops().empty())
    rules->flops = rule::parse(k.flops(), names, why);
  if (!k.cuda().threads().empty())
    rules->threads[0] = rule::parse(k.cuda().threads(), names, why);
  if (!k.hip().threads().empty())
    rules->threads[1] = rule::parse(k.hip().threads(), names, why);
  d.check = [rules](const kernel_args& a, input_lengths in) {
    return check_call(*rules, a, in);
  };
  d.output_elements = [rules](const kernel_args& a, input_lengths in) {
    std::string why;
    auto v = rules->output_size.eval(a, in, why);
    return v && *v > 0 ? uint64_t(*v) : uint64_t{0};
  };
  if (rules->flops)
    d.cost = [rules](const kernel_args& a, input_lengths in) {
      std::string why;
      auto v = rules->flops->eval(a, in, why);
      return kernel_cost{v && *v > 0 ? double(*v) : 0.0, 0.0};
    };
  auto out_type = d.signature.output.type;
  auto run = [rules, code, out_type](const kernel_args& a, typed_inputs in,
                                     std::chrono::milliseconds limit) {
    input_shape lens;
    for (auto& v : in)
      lens.push_back(v.size);
    std::string why;
    auto n = rules->output_size.eval(a, input_lengths{lens}, why);
    kernel_output out;
    out.resize(out_type, n && *n > 0 ? uint64_t(*n) : 0);
    if (!code.hosts)
      return call_in_process(*rules, code.fn, a, in, std::move(out));
    code.hosts->call(code.index, a, in, out, limit);
    return out;
  };
  d.cpu = [run](const kernel_args& a, typed_inputs in) {
    return run(a, in, default_call_timeout);
  };
  d.cpu_within = run;
  d.cuda = gpu_code_of(k.cuda(), b, rules, 0);
  d.hip = gpu_code_of(k.hip(), b, rules, 1);
  d.origin = "bundle " + b.manifest.name() + " " + b.manifest.version() +
             " (key " + b.key_id + ")";
  d.source = b.manifest_sha256;
  return d;
}

// The ids of `b`'s kernels when the same manifest was loaded before.
std::optional<std::vector<kernel_id>> loaded_before(const checked_bundle& b) {
  std::vector<kernel_id> ids;
  for (auto& k : b.manifest.kernel()) {
    auto id = parse_kernel(k.name());
    auto* d = id ? find(*id) : nullptr;
    if (d == nullptr || d->source != b.manifest_sha256)
      return std::nullopt;
    ids.push_back(*id);
  }
  return ids;
}

// Serializes loads: two threads loading the same bundle must not both
// open its shared objects.
std::mutex load_mutex;

} // namespace

std::variant<loaded_bundle, refused> load_checked(const checked_bundle& b,
                                                  const isolation& iso) {
  std::lock_guard guard{load_mutex};
  loaded_bundle out;
  out.name = b.manifest.name();
  out.version = b.manifest.version();
  out.key_id = b.key_id;
  out.manifest_sha256 = b.manifest_sha256;
  auto fill = [&](const std::vector<kernel_id>& ids) {
    for (int i = 0; i < b.manifest.kernel_size(); ++i)
      out.kernels.emplace_back(b.manifest.kernel(i).name(), ids[size_t(i)]);
  };
  if (auto ids = loaded_before(b)) {
    out.fresh = false;
    fill(*ids);
    return out;
  }
  // Nothing of the bundle runs in this process before a child has loaded
  // all of it and lived.
  auto probed = probe(b, iso);
  if (auto* no = std::get_if<refused>(&probed))
    return *no;
  out.probed = std::move(std::get<probe_report>(probed));
  std::vector<kernel_def> defs;
  std::map<std::string, void*> objects;
  auto unload = [&] {
    for (auto& [path, h] : objects)
      ::dlclose(h);
  };
  if (!iso.cpu_in_process) {
    // Its CPU code runs in kernel host processes only: nothing of it is
    // loaded here.
    if (iso.host.empty())
      return refused{refusal::load_failed,
                     std::string{"no "} + host_program +
                         " to run its CPU code in (searched: " +
                         (iso.searched.empty() ? "nowhere" : iso.searched) +
                         "; set COHORT_PLUGIN_PATH to the folder holding it)"};
    std::vector<std::pair<std::string, std::string>> blobs;
    std::map<std::string, uint32_t> index_of;
    std::vector<pb::KernelHostStart::Kernel> entries;
    for (auto& k : b.manifest.kernel()) {
      auto [at, fresh] = index_of.emplace(k.cpu_blob(), uint32_t(blobs.size()));
      if (fresh)
        blobs.emplace_back(k.cpu_blob(), b.blobs.at(k.cpu_blob()));
      auto& e = entries.emplace_back();
      e.set_object(at->second);
      e.set_symbol(k.cpu_symbol());
      e.set_name(k.name());
    }
    host_settings hs;
    hs.program = iso.host;
    hs.memory_limit = iso.host_memory_limit;
    std::string why;
    auto hosts = kernel_hosts::make(b.manifest.name(), blobs, entries, hs, why);
    if (!hosts)
      return refused{refusal::load_failed, why};
    for (int i = 0; i < b.manifest.kernel_size(); ++i)
      defs.push_back(
          make_def(b.manifest.kernel(i), {nullptr, hosts, uint32_t(i)}, b));
  }
  for (auto& k : b.manifest.kernel()) {
    if (!iso.cpu_in_process)
      break;
    auto& h = objects[k.cpu_blob()];
    std::string why;
    if (h == nullptr)
      h = open_shared_object(b.manifest.name(), k.cpu_blob(),
                             b.blobs.at(k.cpu_blob()), why);
    if (h == nullptr) {
      objects.erase(k.cpu_blob());
      unload();
      return refused{refusal::load_failed, why};
    }
    auto* sym = ::dlsym(h, k.cpu_symbol().c_str());
    if (sym == nullptr) {
      unload();
      return refused{refusal::load_failed,
                     "kernel '" + k.name() + "': blob '" + k.cpu_blob() +
                         "' has no symbol '" + k.cpu_symbol() + "'"};
    }
    defs.push_back(
        make_def(k, {reinterpret_cast<cohort_cpu_kernel>(sym), nullptr, 0}, b));
  }
  std::string why;
  auto ids = register_kernels(std::move(defs), why);
  if (!ids) {
    unload();
    return refused{refusal::conflict, why};
  }
  // The objects stay loaded for the life of the process, like the kernels.
  fill(*ids);
  return out;
}

std::variant<loaded_bundle, refused> load_bundle(const std::string& dir,
                                                 const trust_store& trust,
                                                 const isolation& iso) {
  auto checked = check_bundle(dir, trust);
  if (auto* r = std::get_if<refused>(&checked))
    return *r;
  return load_checked(std::get<checked_bundle>(checked), iso);
}

} // namespace cohort::kernels::bundle
