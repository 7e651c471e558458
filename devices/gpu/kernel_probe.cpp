// cohort-kernel-probe: loads a verified bundle's code in a process of its
// own before the node loads it (docs/kernels.md, "Loading in isolation").
// Shared objects are opened (their constructors run here, not in the node)
// and their symbols looked up; GPU code is loaded, and PTX compiled by the
// driver's JIT, on one GPU of each kind the node has, and its entry points
// looked up. The request (a BundleProbe) comes on standard input, each
// blob's bytes as an inherited descriptor; what happens comes back as
// BundleProbeEvents on standard output. A crash or hang here costs the node
// nothing: it kills this process after its timeout and refuses the bundle.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/util/delimited_message_util.h>

#include "devices/gpu/plugin.hpp"
#include "ipc/child.hpp"
#include "messages/bundle.pb.h"

namespace {

using cohort::pb::BundleBlob;
using cohort::pb::BundleProbe;
using cohort::pb::BundleProbeEvent;
namespace gpu = cohort::devices::gpu;

google::protobuf::io::FileOutputStream* out_stream = nullptr;

// Each event is flushed at once: after a crash, the node knows the last
// step that started.
void say(BundleProbeEvent::Kind kind, const std::string& path,
         const std::string& device, const std::string& text = {}) {
  BundleProbeEvent e;
  e.set_kind(kind);
  e.set_path(path);
  e.set_device(device);
  e.set_text(text);
  google::protobuf::util::SerializeDelimitedToZeroCopyStream(e, out_stream);
  out_stream->Flush();
}

bool read_all(int fd, std::string& bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return false;
  bytes.resize(size_t(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    auto n = ::pread(fd, bytes.data() + got, bytes.size() - got, off_t(got));
    if (n <= 0)
      return false;
    got += size_t(n);
  }
  return true;
}

void probe_shared_object(const BundleProbe::Object& o) {
  say(BundleProbeEvent::STEP, o.path(), "cpu");
  auto where = "/proc/self/fd/" + std::to_string(o.fd());
  void* h = ::dlopen(where.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    auto* err = ::dlerror();
    say(BundleProbeEvent::FAILED, o.path(), "cpu",
        std::string{"does not load: "} + (err ? err : "dlopen failed"));
    return;
  }
  for (auto& s : o.symbol())
    if (::dlsym(h, s.c_str()) == nullptr) {
      say(BundleProbeEvent::FAILED, o.path(), "cpu",
          "has no symbol '" + s + "'");
      return;
    }
  // Left open: its destructors are not the probe's business.
  say(BundleProbeEvent::OK, o.path(), "cpu");
}

const char* vendor_of(BundleBlob::Kind k) {
  return k == BundleBlob::HIP_CODE_OBJECT ? "HIP" : "CUDA";
}

// Loads every `objects` image of one vendor on one GPU of each kind
// (name, compute capability, architecture) the plugin finds.
void probe_gpu(const std::string& vendor, const std::string& plugin_path,
               const std::vector<const BundleProbe::Object*>& objects) {
  auto none = [&](const std::string& why) {
    for (auto* o : objects)
      say(BundleProbeEvent::NOTE, o->path(), vendor, why);
  };
  namespace fs = std::filesystem;
  auto loaded =
      gpu::load_plugin(vendor, {fs::path{plugin_path}.parent_path().string()});
  if (loaded.entry == nullptr) {
    for (auto* o : objects)
      say(BundleProbeEvent::FAILED, o->path(), vendor,
          "the " + vendor + " plugin does not load here: " + loaded.note);
    return;
  }
  auto rt = loaded.entry->make_runtime();
  int n = 0;
  if (rt == nullptr || rt->device_count(n).failed() || n == 0)
    return none("not loaded: no " + vendor + " GPU answers");
  std::set<std::tuple<std::string, int, int, std::string>> kinds;
  std::string lower = vendor == "HIP" ? "hip" : "cuda";
  for (int d = 0; d < n; ++d) {
    gpu::properties p;
    if (rt->get_properties(d, p).failed())
      continue;
    if (!kinds.emplace(p.name, p.cc_major, p.cc_minor, p.arch).second)
      continue;
    auto device = lower + std::to_string(d) + " (" + p.name + ", " +
                  (p.arch.empty() ? "sm_" + std::to_string(p.cc_major) +
                                        std::to_string(p.cc_minor)
                                  : p.arch) +
                  ")";
    if (auto r = rt->set_device(d); r.failed()) {
      for (auto* o : objects)
        say(BundleProbeEvent::FAILED, o->path(), device,
            "cannot use the device: " + rt->describe(r.raw));
      continue;
    }
    for (auto* o : objects) {
      say(BundleProbeEvent::STEP, o->path(), device);
      std::string image;
      if (!read_all(o->fd(), image)) {
        say(BundleProbeEvent::FAILED, o->path(), device,
            "cannot read the image the node passed");
        continue;
      }
      // PTX is text the driver reads up to a NUL.
      if (o->kind() == BundleBlob::CUDA_PTX &&
          (image.empty() || image.back() != '\0'))
        image.push_back('\0');
      gpu::module_t m = nullptr;
      std::string log;
      if (auto r = rt->module_load(image.data(), image.size(), m, log);
          r.failed()) {
        say(BundleProbeEvent::FAILED, o->path(), device,
            "the driver refused it: " + rt->describe(r.raw) +
                (log.empty() ? "" : "; its log: " + log));
        continue;
      }
      std::string missing;
      for (auto& s : o->symbol()) {
        gpu::function_t f = nullptr;
        if (rt->module_function(m, s.c_str(), f).failed())
          missing += (missing.empty() ? "'" : ", '") + s + "'";
      }
      rt->module_unload(m);
      if (!missing.empty())
        say(BundleProbeEvent::FAILED, o->path(), device,
            "has no entry point " + missing);
      else
        say(BundleProbeEvent::OK, o->path(), device);
    }
  }
}

} // namespace

int main(int argc, char** argv) {
  // Dies with the node; a crash here ends it by its signal, which the
  // node reports, and leaves no core file behind.
  if (int status = cohort::ipc::enter_helper(
          argc, argv, " < BundleProbe",
          "cohort-kernel-probe is started by a Cohort node to load a kernel "
          "bundle's code in a process of its own; it is not meant to be run "
          "by hand.");
      status >= 0)
    return status;

  BundleProbe req;
  if (!req.ParseFromFileDescriptor(0)) {
    std::fprintf(stderr, "cohort-kernel-probe: the request does not parse\n");
    return 2;
  }
  google::protobuf::io::FileOutputStream out{1};
  out_stream = &out;
  std::map<std::string, std::vector<const BundleProbe::Object*>> gpu_objects;
  for (auto& o : req.object()) {
    if (o.kind() == BundleBlob::CPU_SHARED_OBJECT)
      probe_shared_object(o);
    else
      gpu_objects[vendor_of(o.kind())].push_back(&o);
  }
  for (auto& [vendor, objects] : gpu_objects) {
    auto p = req.plugin().find(vendor);
    if (p == req.plugin().end()) {
      for (auto* o : objects)
        say(BundleProbeEvent::NOTE, o->path(), vendor,
            "not loaded: the node has no " + vendor + " plugin");
      continue;
    }
    probe_gpu(vendor, p->second, objects);
  }
  out.Flush();
  // No destructors, no atexit handlers of what was loaded: the report is
  // complete.
  std::fflush(nullptr);
  ::_exit(0);
}
