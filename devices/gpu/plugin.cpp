#include "devices/gpu/plugin.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <system_error>

#include "kernels/gpu/launch.hpp"

// Set by devices/meson.build: where programs and plugins are installed (only
// the path between them is used, so an installed tree may move), and the
// build tree's root.
#ifndef COHORT_INSTALL_BINDIR
#define COHORT_INSTALL_BINDIR "/usr/local/bin"
#define COHORT_INSTALL_PLUGINDIR "/usr/local/lib/cohort"
#endif
#ifndef COHORT_SYSTEM_PLUGINDIR
#define COHORT_SYSTEM_PLUGINDIR "/usr/lib/cohort"
#endif
#ifndef COHORT_BUILD_ROOT
#define COHORT_BUILD_ROOT ""
#endif

namespace cohort::devices::gpu {

namespace fs = std::filesystem;

std::string plugin_file(const std::string& vendor) {
  std::string lower;
  for (char c : vendor)
    lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return "libcohort-" + lower + ".so";
}

namespace {

/// The folder of the object (libcohort.so, or a program linking the core
/// statically) that holds this code. /proc/self/maps names the file behind
/// an address with its full path; dladdr only gives argv[0] for the main
/// program, which is a bare name when it was found on PATH.
fs::path core_folder() {
  auto here = reinterpret_cast<uintptr_t>(&plugin_file);
  std::ifstream maps{"/proc/self/maps"};
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &lo, &hi) != 2 || here < lo ||
        here >= hi)
      continue;
    auto slash = line.find('/');
    if (slash == std::string::npos)
      break;
    return fs::path{line.substr(slash)}.parent_path();
  }
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&plugin_file), &info) == 0 ||
      info.dli_fname == nullptr)
    return {};
  std::error_code ec;
  auto p = fs::canonical(info.dli_fname, ec);
  return ec ? fs::path{} : p.parent_path();
}

void add_unique(std::vector<std::string>& out, const fs::path& p) {
  auto s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/')
    s.pop_back();
  for (auto& x : out)
    if (x == s)
      return;
  out.push_back(std::move(s));
}

} // namespace

std::vector<std::string> plugin_dirs() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("COHORT_PLUGIN_PATH")) {
    std::string all = env;
    size_t start = 0;
    while (start <= all.size()) {
      auto end = all.find(':', start);
      if (end == std::string::npos)
        end = all.size();
      if (end > start)
        add_unique(out, all.substr(start, end - start));
      start = end + 1;
    }
  }
  auto core = core_folder();
  if (!core.empty()) {
    add_unique(out, core / "cohort");
    add_unique(out,
               core / fs::path{COHORT_INSTALL_PLUGINDIR}.lexically_relative(
                          COHORT_INSTALL_BINDIR));
    // Only a core inside its own build tree looks there: an installed
    // program never loads plugins from a build folder.
    std::string root = COHORT_BUILD_ROOT;
    if (!root.empty() && core.string().rfind(root + "/", 0) == 0)
      add_unique(out, fs::path{root} / "devices");
  }
  // A program linking libcohort.a from anywhere: where this build installs
  // them, and where the Debian packages do.
  add_unique(out, COHORT_INSTALL_PLUGINDIR);
  add_unique(out, COHORT_SYSTEM_PLUGINDIR);
  return out;
}

plugin_load load_plugin(const std::string& vendor,
                        const std::vector<std::string>& dirs) {
  plugin_load out;
  out.vendor = vendor;
  out.file = plugin_file(vendor);
  std::string searched;
  for (auto& dir : dirs) {
    auto candidate = fs::path{dir} / out.file;
    std::error_code ec;
    if (!fs::exists(candidate, ec)) {
      searched += (searched.empty() ? "" : ", ") + dir;
      continue;
    }
    out.path = candidate.string();
    break;
  }
  if (out.path.empty()) {
    out.note = out.file + " not found (searched: " +
               (searched.empty() ? std::string{"no folder"} : searched) +
               "; set COHORT_PLUGIN_PATH to add one)";
    return out;
  }
  // RTLD_LOCAL: each plugin keeps its vendor libraries and its copy of the
  // kernels to itself. Never closed: the runtime it made outlives any scope.
  void* handle = dlopen(out.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    out.note = "cannot load " + out.path + ": " + (err ? err : "dlopen failed");
    out.path.clear();
    return out;
  }
  using entry_fn = const plugin_entry* (*)();
  auto fn = reinterpret_cast<entry_fn>(dlsym(handle, plugin_symbol));
  const plugin_entry* entry = fn ? fn() : nullptr;
  auto refuse = [&](std::string why) {
    out.note = out.path + " refused: " + why;
    out.path.clear();
    dlclose(handle);
    return out;
  };
  if (entry == nullptr)
    return refuse(std::string{"no "} + plugin_symbol +
                  "() or it returned null");
  if (entry->abi != plugin_abi)
    return refuse("plugin ABI " + std::to_string(entry->abi) +
                  ", this core has " + std::to_string(plugin_abi));
  if (entry->build_id == nullptr ||
      std::string{entry->build_id} != plugin_build_id())
    return refuse(std::string{"built by '"} +
                  (entry->build_id ? entry->build_id : "?") +
                  "', this core by '" + plugin_build_id() + "'");
  if (entry->launch_args_size != sizeof(kernels::gpu::launch_args))
    return refuse("launch_args has " + std::to_string(entry->launch_args_size) +
                  " bytes there, " +
                  std::to_string(sizeof(kernels::gpu::launch_args)) + " here");
  if (entry->vendor == nullptr || std::string{entry->vendor} != vendor)
    return refuse(std::string{"it is a "} +
                  (entry->vendor ? entry->vendor : "nameless") +
                  " plugin, not " + vendor);
  if (entry->make_runtime == nullptr)
    return refuse("it makes no runtime");
  out.entry = entry;
  return out;
}

const plugin_load& plugin(const std::string& vendor) {
  static std::mutex mtx;
  static std::map<std::string, plugin_load> loaded;
  std::lock_guard<std::mutex> guard{mtx};
  auto i = loaded.find(vendor);
  if (i == loaded.end())
    i = loaded.emplace(vendor, load_plugin(vendor, plugin_dirs())).first;
  return i->second;
}

} // namespace cohort::devices::gpu
