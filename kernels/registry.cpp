#include "kernels/registry.hpp"

#include <array>
#include <atomic>
#include <deque>
#include <mutex>

#include "kernels/builtin.hpp"
#include "kernels/geo.hpp"

namespace cohort::kernels {

namespace {

// Definitions live as long as the process (never freed: readers hold bare
// pointers without a lock); the ids index `defs`.
struct table {
  std::array<std::atomic<const kernel_def*>, max_kernels + 1> defs{};
  std::mutex mtx;
  std::deque<kernel_def> storage;
};

// Adapts a built-in kernel to the registry's typed interface (its inputs
// are f32: check_types saw to it).
kernel_def builtin_def(kernel_id id) {
  kernel_def d;
  d.name = std::string{builtin::name(id)};
  static constexpr const char* input_names[][2] = {
      {},        {"x", "y"}, {"x", "y"}, {"x", ""},           {"x", ""},
      {"x", ""}, {"a", "x"}, {"a", "b"}, {"rows", "queries"},
  };
  for (size_t i = 0; i < builtin::input_count(id); ++i)
    d.signature.inputs.push_back(
        {input_names[static_cast<uint8_t>(id)][i], dtype::f32});
  d.signature.output = {id == kernel_id::topk_cosine ? "scores" : "out",
                        dtype::f32};
  d.signature.scalars = builtin::scalars(id);
  d.check = [id](const kernel_args& a, input_lengths in) {
    return builtin::check(id, a, in);
  };
  d.output_elements = [id](const kernel_args& a, input_lengths in) {
    return builtin::output_elements(id, a, in);
  };
  d.cost = [id](const kernel_args& a, input_lengths in) {
    return builtin::cost(id, a, in);
  };
  auto as_floats = [](typed_inputs in) {
    small_vector<std::span<const float>, 8> out;
    for (auto& v : in)
      out.push_back(v.as<float>());
    return out;
  };
  d.cpu = [id, as_floats](const kernel_args& a, typed_inputs in) {
    auto views = as_floats(in);
    return builtin::run_cpu(id, a, input_views{views});
  };
  d.reference = [id, as_floats](const kernel_args& a, typed_inputs in) {
    auto views = as_floats(in);
    return builtin::run_reference(id, a, input_views{views});
  };
  d.origin = "built-in";
  return d;
}

table& the_table() {
  static table* t = [] {
    auto* t = new table;
    for (auto id : builtin::all) {
      auto& d = t->storage.emplace_back(builtin_def(id));
      t->defs[static_cast<uint8_t>(id)].store(&d, std::memory_order_release);
    }
    // The geo kernels take the next ids: registered kernels through and
    // through (their GPU code is a module the core carries).
    auto slot = size_t(static_cast<uint8_t>(
                    builtin::all[std::size(builtin::all) - 1])) +
                1;
    for (auto& def : geo::definitions()) {
      auto& d = t->storage.emplace_back(std::move(def));
      t->defs[slot++].store(&d, std::memory_order_release);
    }
    return t;
  }();
  return *t;
}

bool valid_name(std::string_view s) {
  if (s.empty() || s.size() > 64 || !(s[0] >= 'a' && s[0] <= 'z'))
    return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.'))
      return false;
  return true;
}

std::string check_def(const kernel_def& d) {
  if (!valid_name(d.name))
    return "kernel name '" + d.name +
           "' is not valid: 1 to 64 characters of a-z, 0-9, '_' and '.', "
           "starting with a letter";
  auto who = "kernel '" + d.name + "': ";
  auto n = d.signature.inputs.size();
  if (n == 0 || n > 8)
    return who + "takes " + std::to_string(n) +
           " inputs; a kernel takes 1 to 8 input buffers";
  for (auto& p : d.signature.inputs)
    if (p.name.empty() || static_cast<unsigned>(p.type) >= dtype_limit)
      return who + "every input needs a name and an element type";
  if (static_cast<unsigned>(d.signature.output.type) >= dtype_limit)
    return who + "the output has no valid element type";
  for (auto& s : d.signature.scalars)
    if (s != "alpha" && s != "m" && s != "n" && s != "k" && s != "top_k")
      return who + "scalar '" + s + "' is not one of alpha, m, n, k, top_k";
  if (!d.output_elements && !d.sized_by_caller)
    return who + "needs an output size rule (output_elements)";
  if (!d.cpu && !d.sized_by_caller)
    return who + "needs a CPU implementation (CPU workers, simulated GPUs "
                 "and fallback run it)";
  if (d.sized_by_caller && !d.cuda.present() && !d.hip.present())
    return who + "has no GPU code to run in a device host";
  for (bool cuda : {true, false}) {
    auto& g = cuda ? d.cuda : d.hip;
    auto backend = std::string{cuda ? "CUDA" : "HIP"};
    if (g.kind == gpu_code::format::none)
      continue;
    if (cuda == (g.kind == gpu_code::format::hip_code_object))
      return who + backend + " code must be " +
             (cuda ? "PTX, a cubin or a fatbin" : "a HIP code object");
    if (!g.image || g.image->empty())
      return who + backend + " code has an empty image";
    // The driver reads PTX as a C string.
    if (g.kind == gpu_code::format::ptx && g.image->back() != 0)
      return who + "PTX must end with a NUL byte";
    if (!valid_c_identifier(g.function))
      return who + backend + " entry point '" + g.function +
             "' is not a C identifier";
    if (g.block == 0 || g.block > 1024)
      return who + backend + " block of " + std::to_string(g.block) +
             " threads; 1 to 1024 are allowed";
  }
  return {};
}

} // namespace

bool valid_c_identifier(std::string_view s) {
  if (s.empty() || s.size() > 128 || (s[0] >= '0' && s[0] <= '9'))
    return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '_'))
      return false;
  return true;
}

bool is_builtin(kernel_id id) {
  auto raw = static_cast<uint8_t>(id);
  return raw >= static_cast<uint8_t>(kernel_id::axpy) &&
         raw <= static_cast<uint8_t>(kernel_id::topk_cosine);
}

const kernel_def* find(kernel_id id) {
  auto raw = static_cast<uint8_t>(id);
  if (raw == 0)
    return nullptr;
  return the_table().defs[raw].load(std::memory_order_acquire);
}

std::optional<kernel_id> register_kernel(kernel_def def, std::string& why) {
  std::vector<kernel_def> one;
  one.push_back(std::move(def));
  auto ids = register_kernels(std::move(one), why);
  if (!ids)
    return std::nullopt;
  return ids->front();
}

std::optional<std::vector<kernel_id>>
register_kernels(std::vector<kernel_def> defs, std::string& why) {
  for (auto& d : defs)
    if (why = check_def(d); !why.empty())
      return std::nullopt;
  for (size_t i = 0; i < defs.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (defs[i].name == defs[j].name) {
        why = "kernel '" + defs[i].name + "' is defined twice";
        return std::nullopt;
      }
  auto& t = the_table();
  std::lock_guard guard{t.mtx};
  // First decide every id (taken over from the same source, or a free
  // slot), then publish: a refusal leaves the registry as it was.
  std::vector<kernel_id> ids(defs.size());
  std::vector<bool> fresh(defs.size(), true);
  std::vector<size_t> free_slots;
  for (size_t i = 1; i <= max_kernels; ++i) {
    auto* d = t.defs[i].load(std::memory_order_relaxed);
    if (d == nullptr) {
      free_slots.push_back(i);
      continue;
    }
    for (size_t j = 0; j < defs.size(); ++j) {
      if (d->name != defs[j].name)
        continue;
      if (defs[j].source.empty() || d->source != defs[j].source) {
        why = "kernel '" + defs[j].name + "' is already registered (" +
              d->origin + ")";
        return std::nullopt;
      }
      ids[j] = static_cast<kernel_id>(i);
      fresh[j] = false;
    }
  }
  size_t next = 0;
  for (size_t j = 0; j < defs.size(); ++j) {
    if (!fresh[j])
      continue;
    if (next == free_slots.size()) {
      why = "the kernel registry is full (" + std::to_string(max_kernels) +
            " kernels per process)";
      return std::nullopt;
    }
    ids[j] = static_cast<kernel_id>(free_slots[next++]);
  }
  for (size_t j = 0; j < defs.size(); ++j) {
    if (!fresh[j])
      continue;
    auto& d = t.storage.emplace_back(std::move(defs[j]));
    t.defs[static_cast<uint8_t>(ids[j])].store(&d, std::memory_order_release);
  }
  return ids;
}

std::string register_node_kernel(kernel_id id, kernel_def def) {
  if (!def.sized_by_caller)
    return "kernel '" + def.name + "': not a node's kernel (sized_by_caller)";
  if (auto why = check_def(def); !why.empty())
    return why;
  auto raw = static_cast<uint8_t>(id);
  if (raw == 0)
    return "kernel '" + def.name + "': id 0 is no kernel's";
  auto& t = the_table();
  std::lock_guard guard{t.mtx};
  if (auto* d = t.defs[raw].load(std::memory_order_relaxed)) {
    // Sent again, or this process is the node's (tests run both in one).
    if (d->name == def.name)
      return {};
    return "kernel '" + def.name + "': id " + std::to_string(raw) +
           " is kernel '" + d->name + "' (" + d->origin +
           ") in this process: it is not the node's build of Cohort, or the "
           "node's kernels changed";
  }
  // A name is unique in a process: one the node registered at another id
  // is taken here too.
  for (size_t i = 1; i <= max_kernels; ++i)
    if (auto* d = t.defs[i].load(std::memory_order_relaxed);
        d != nullptr && d->name == def.name)
      return "kernel '" + def.name + "' is already registered at id " +
             std::to_string(i) + " in this process, the node sent id " +
             std::to_string(raw);
  auto& d = t.storage.emplace_back(std::move(def));
  t.defs[raw].store(&d, std::memory_order_release);
  return {};
}

std::vector<kernel_info> registered_kernels() {
  std::vector<kernel_info> out;
  for (unsigned i = 1; i <= max_kernels; ++i) {
    auto id = static_cast<kernel_id>(i);
    if (auto* d = find(id))
      out.push_back({id, d->name, d->origin, d->signature, is_builtin(id),
                     is_builtin(id) || d->cuda.present(),
                     is_builtin(id) || d->hip.present()});
  }
  return out;
}

bool has_gpu_code(kernel_id id, bool cuda) {
  if (is_builtin(id))
    return true;
  auto* d = find(id);
  return d != nullptr && (cuda ? d->cuda.present() : d->hip.present());
}

std::string check_types(kernel_id id, std::span<const dtype> types) {
  auto* d = find(id);
  if (d == nullptr)
    return "unknown kernel";
  auto& ins = d->signature.inputs;
  for (size_t i = 0; i < types.size() && i < ins.size(); ++i)
    if (types[i] != ins[i].type)
      return d->name + ": input " + std::to_string(i) + " ('" + ins[i].name +
             "') takes " + std::string{name(ins[i].type)} + ", got " +
             std::string{name(types[i])};
  return {};
}

} // namespace cohort::kernels
