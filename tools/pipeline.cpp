#include "tools/pipeline.hpp"

#include "config/compile.hpp"
#include "config/quotas.hpp"
#include "tools/scheduler_arg.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <unistd.h>

#include <caf/all.hpp>

#include "actors/runtime.hpp"
#include "chaos/fault_injector.hpp"
#include "kernels/random_data.hpp"
#include "messages/convert.hpp"
#include "messages/errc.hpp"
#include "tools/byte_units.hpp"
#include "tools/npy.hpp"
#include "tools/terminal_text.hpp"

namespace cohort::tools {

namespace {

using clock = std::chrono::steady_clock;

// Largest input a pipeline stage may ask for, in elements per buffer.
constexpr uint64_t max_stage_elements = uint64_t{1} << 26;

std::string too_large(const std::string& what) {
  return what + " holds more than " + std::to_string(max_stage_elements) +
         " elements per input";
}

// Random-mode shapes of a built-in kernel's inputs; topk_cosine reads
// args.k as the query count.
caf::expected<std::vector<uint64_t>> random_sizes(const pb::Stage& st,
                                                  kernel_id id) {
  auto& a = st.args();
  uint64_t n = a.n(), m = a.m(), k = a.k();
  std::vector<uint64_t> sizes;
  switch (id) {
  case kernel_id::axpy:
  case kernel_id::dot:
    sizes = {n, n};
    break;
  case kernel_id::nrm2:
  case kernel_id::reduce_sum:
  case kernel_id::inclusive_scan:
    sizes = {n};
    break;
  case kernel_id::gemv:
    sizes = {m * n, n};
    break;
  case kernel_id::gemm:
    sizes = {m * k, k * n};
    break;
  case kernel_id::topk_cosine:
    sizes = {m * n, std::max<uint64_t>(k, 1) * n};
    break;
  default:
    return make_error(errc::malformed_pipeline,
                      "stage '" + st.name() + "' runs " +
                          std::string{kernels::name(id)} +
                          ", which has no random-data mode: name its inputs "
                          "(input { file: ... } or input { stage: ... })");
  }
  for (auto s : sizes)
    if (s > max_stage_elements || m > max_stage_elements ||
        n > max_stage_elements || k > max_stage_elements)
      return make_error(errc::malformed_pipeline,
                        too_large("stage '" + st.name() + "'"));
  return sizes;
}

// Where one input of a stage comes from.
struct input_plan {
  enum class source { random, split, whole, stage };
  source kind = source::random;
  kernels::dtype type = kernels::dtype::f32;
  /// random: its length.
  uint64_t length = 0;
  /// split: index into batch_plan::files.
  size_t file = 0;
  /// whole: read once, shared by every item.
  host_buffer data;
  /// stage: the group whose output it takes.
  int producer = -1;
  /// split: the argument that takes the batch's rows ('m', 'n', 'k' or 0).
  char rows_arg = 0;
};

input_plan random_input(uint64_t length) {
  input_plan ip;
  ip.length = length;
  return ip;
}

struct stage_plan {
  kernel_id kernel{};
  kernels::kernel_args args;
  /// A chained stage's inputs leave out the slot the previous output fills.
  std::vector<input_plan> inputs;
  uint32_t chain_slot = 0;
};

// Where one stage's outputs go: each batch's at its offset.
struct output_plan {
  int group = 0;
  std::string path;
  kernels::dtype type = kernels::dtype::f32;
  /// Element offsets of each batch's output (batches + 1 of them).
  std::vector<uint64_t> offsets;
  std::vector<uint64_t> shape;
};

// The items of the pipeline: one per group per batch, a group being a
// stage and the stages chained after it.
struct batch_plan {
  std::vector<stage_plan> stages;
  /// Stage indices of each group.
  std::vector<std::vector<int>> groups;
  /// The tenant of each group's items.
  std::vector<std::string> tenants;
  /// The groups each group's items read the outputs of (in the same
  /// batch), and how many groups read each group's output.
  std::vector<std::vector<int>> producers;
  std::vector<uint32_t> consumers;
  /// Files split into batches, and their rows (all the same).
  std::vector<std::shared_ptr<npy::reader>> files;
  uint64_t rows = 0;
  uint64_t batch_rows = 0;
  uint64_t batches = 0;
  std::vector<output_plan> outputs;
  /// Index into `outputs` of each group's output file, or -1.
  std::vector<int> output_of;

  uint64_t items() const { return batches * groups.size(); }

  /// Rows [first, first + count) of the split files in batch `b`.
  std::pair<uint64_t, uint64_t> rows_of(uint64_t b) const {
    if (batch_rows > 0) {
      auto first = b * batch_rows;
      return {first, std::min(batch_rows, rows - first)};
    }
    auto base = rows / batches, extra = rows % batches;
    return {b * base + std::min(b, extra), base + (b < extra ? 1 : 0)};
  }
};

void set_rows_arg(kernels::kernel_args& args, char which, uint64_t rows) {
  switch (which) {
  case 'm':
    args.m = rows;
    break;
  case 'n':
    args.n = rows;
    break;
  case 'k':
    args.k = rows;
    break;
  default:
    break;
  }
}

kernels::kernel_args args_of(const pb::Stage& st, kernel_id id) {
  kernels::kernel_args args{st.args().alpha(), st.args().m(), st.args().n(),
                            st.args().k(), st.args().top_k()};
  if (id == kernel_id::axpy && st.args().alpha() == 0 && st.input_size() == 0)
    args.alpha = 2.0f;
  return args;
}

host_buffer to_buffer(kernels::kernel_output&& out) {
  if (out.type == kernels::dtype::f32)
    return host_buffer{std::move(out.values)};
  auto held = std::make_shared<std::vector<uint8_t>>(std::move(out.raw));
  auto* data = held->data();
  auto n = held->size() / kernels::element_size(out.type);
  return host_buffer{std::shared_ptr<const void>{std::move(held)}, data, n,
                     out.type};
}

// The outputs of earlier groups an item reads, by group.
using output_lookup = std::function<const host_buffer*(int group)>;

// Builds the item at `index` (batch index / groups, group index % groups).
caf::expected<work_item> make_item(const pb::PipelineSpec& spec, uint64_t index,
                                   const batch_plan& plan,
                                   const output_lookup& outputs) {
  auto groups = uint64_t(plan.groups.size());
  auto batch = index / groups;
  auto g = int(index % groups);
  auto& group = plan.groups[g];
  // Not a structured binding: clang 15 cannot capture one in a lambda.
  auto span = plan.files.empty() ? std::pair<uint64_t, uint64_t>{0, 0}
                                 : plan.rows_of(batch);
  uint64_t first_row = span.first, rows = span.second;
  uint64_t seed = (spec.seed() * 1000003 + index) * 4;
  auto inputs_of = [&](const stage_plan& st, kernels::kernel_args& args,
                       std::vector<host_buffer>& out) -> caf::error {
    for (auto& in : st.inputs) {
      switch (in.kind) {
      case input_plan::source::random:
        out.emplace_back(kernels::random_floats(seed++, in.length));
        break;
      case input_plan::source::whole:
        out.push_back(in.data);
        break;
      case input_plan::source::split: {
        auto read = plan.files[in.file]->rows(first_row, rows);
        if (!read)
          return read.error();
        out.push_back(std::move(*read));
        set_rows_arg(args, in.rows_arg, rows);
        break;
      }
      case input_plan::source::stage: {
        auto* held = outputs ? outputs(in.producer) : nullptr;
        if (held == nullptr)
          return make_error(errc::malformed_pipeline,
                            "an input stage's output is missing");
        out.push_back(*held);
        break;
      }
      }
    }
    return caf::none;
  };
  auto& first = plan.stages[group[0]];
  work_item item;
  item.id = index + 1;
  item.tenant = plan.tenants[g];
  item.kernel = first.kernel;
  item.args = first.args;
  item.gang = spec.stage(group[0]).gang();
  item.priority = spec.stage(group[0]).priority();
  if (auto err = inputs_of(first, item.args, item.inputs))
    return err;
  for (size_t j = 1; j < group.size(); ++j) {
    auto& next = plan.stages[group[j]];
    chained_stage cs;
    cs.kernel = next.kernel;
    cs.args = next.args;
    cs.input_slot = next.chain_slot;
    if (auto err = inputs_of(next, cs.args, cs.inputs))
      return err;
    item.then.push_back(std::move(cs));
  }
  return item;
}

bool is_rejection(errc code) {
  switch (code) {
  case errc::unknown_kernel:
  case errc::invalid_arguments:
  case errc::unknown_tenant:
  case errc::not_granted:
  case errc::over_inflight_quota:
  case errc::over_memory_quota:
  case errc::shutting_down:
    return true;
  default:
    return false;
  }
}

// Shared between the client actor and the thread that waits and shows
// progress (and, once the client has quit, commits the output files).
struct run_shared {
  std::atomic<uint64_t> ended{0};
  std::promise<void> finished;
  pipeline_report report;
  /// One per output_plan; written by the client actor only.
  std::vector<npy::writer> writers;
  /// Per output: batches written, and the first error writing it.
  std::vector<uint64_t> written;
  std::vector<std::string> write_errors;
};

// What became of each item.
enum class item_state : uint8_t { open, ok, failed };

struct client_state {
  const pb::PipelineSpec* spec = nullptr;
  actors::runtime* rt = nullptr;
  std::shared_ptr<run_shared> shared;
  std::shared_ptr<const batch_plan> plan;
  std::map<std::string, uint64_t> cap;
  std::map<std::string, uint64_t> inflight;
  /// Items submitted and not yet ended (for the reference check).
  std::unordered_map<uint64_t, work_item> open;
  std::vector<item_state> state;
  /// The cursor: items before it were submitted, parked or skipped.
  uint64_t next = 0;
  /// Items whose inputs are ready, to go before the cursor's.
  std::deque<uint64_t> ready;
  /// Parked items: how many of their producers have not ended; and the
  /// items parked on each producer.
  std::unordered_map<uint64_t, uint32_t> missing;
  std::unordered_map<uint64_t, std::vector<uint64_t>> waiting;
  /// Outputs kept for the items that read them, with readers left.
  std::unordered_map<uint64_t, std::pair<host_buffer, uint32_t>> kept;
  uint64_t ended = 0;
  bool done = false;
  size_t next_fault = 0;
  std::vector<pb::Fault> faults;
  std::shared_ptr<std::atomic<bool>> cancel;
};

chaos::fault fault_of(const pb::Fault& f) {
  chaos::fault out;
  out.kind = f.kind();
  out.device = f.device();
  out.xid = f.xid();
  out.allocations = std::max(1u, f.count());
  out.factor = f.factor() > 0 ? f.factor() : 1.0;
  out.stream = f.count();
  out.degrees = f.degrees();
  return out;
}

void inject(client_state& st, const pb::Fault& f) {
  auto cf = fault_of(f);
  std::string what = chaos::describe(cf);
  if (auto err = chaos::inject(*st.rt, cf))
    what += " (refused: " + describe(err) + ")";
  st.shared->report.faults.push_back(what + " after batch " +
                                     std::to_string(f.after_batches()));
}

template <class Self> void finish(Self* self) {
  auto& st = self->state;
  if (st.done)
    return;
  st.done = true;
  st.shared->report.not_submitted = st.state.size() - st.ended;
  st.shared->finished.set_value();
  self->quit();
}

void note_error(pipeline_report& rep, std::string what) {
  if (rep.errors.size() < 5)
    rep.errors.push_back(std::move(what));
}

// The producers of item `index` (items of earlier groups in its batch).
template <class F>
void for_producers(const client_state& st, uint64_t index, F f) {
  auto groups = uint64_t(st.plan->groups.size());
  auto base = index - index % groups;
  for (auto p : st.plan->producers[index % groups])
    f(base + uint64_t(p));
}

// Lets go of the kept outputs item `index` reads.
void release_inputs(client_state& st, uint64_t index) {
  for_producers(st, index, [&](uint64_t p) {
    if (auto it = st.kept.find(p);
        it != st.kept.end() && --it->second.second == 0)
      st.kept.erase(it);
  });
}

template <class Self> void end_item(Self* self, uint64_t index, bool ok);

// Ends an item that cannot run: one of its inputs' stages failed.
template <class Self>
void skip_item(Self* self, uint64_t index, const std::string& why) {
  auto& st = self->state;
  ++st.shared->report.skipped;
  note_error(st.shared->report,
             "item " + std::to_string(index + 1) + ": not run: " + why);
  release_inputs(st, index);
  end_item(self, index, false);
}

template <class Self> void end_item(Self* self, uint64_t index, bool ok) {
  auto& st = self->state;
  st.state[index] = ok ? item_state::ok : item_state::failed;
  ++st.ended;
  st.shared->ended.fetch_add(1);
  if (auto it = st.waiting.find(index); it != st.waiting.end()) {
    auto parked = std::move(it->second);
    st.waiting.erase(it);
    for (auto d : parked) {
      auto m = st.missing.find(d);
      if (m == st.missing.end() || --m->second > 0)
        continue;
      st.missing.erase(m);
      bool runnable = true;
      for_producers(st, d, [&](uint64_t p) {
        runnable = runnable && st.state[p] == item_state::ok;
      });
      if (runnable)
        st.ready.push_back(d);
      else
        skip_item(self, d, "a stage it reads from failed in its batch");
    }
  }
  if (st.ended == st.state.size())
    finish(self);
}

template <class Self> void submit_more(Self* self) {
  auto& st = self->state;
  auto& plan = *st.plan;
  auto total = st.state.size();
  auto groups = uint64_t(plan.groups.size());
  auto sink = caf::actor_cast<actors::client_sink>(self);
  if (st.cancel && st.cancel->load()) {
    // Cancelled: what was submitted ends, nothing more goes out.
    if (st.open.empty())
      finish(self);
    return;
  }
  while (!st.done) {
    uint64_t index;
    bool from_ready = !st.ready.empty();
    if (from_ready) {
      index = st.ready.front();
    } else if (st.next < total) {
      index = st.next;
      auto batch = index / groups;
      while (st.next_fault < st.faults.size() &&
             st.faults[st.next_fault].after_batches() <= batch)
        inject(st, st.faults[st.next_fault++]);
      // Parked until its producers end, or skipped if one failed.
      uint32_t missing = 0;
      bool failed = false;
      for_producers(st, index, [&](uint64_t p) {
        if (st.state[p] == item_state::open) {
          ++missing;
          st.waiting[p].push_back(index);
        }
        failed = failed || st.state[p] == item_state::failed;
      });
      if (missing > 0) {
        st.missing.emplace(index, missing);
        ++st.next;
        continue;
      }
      if (failed) {
        ++st.next;
        skip_item(self, index, "a stage it reads from failed in its batch");
        continue;
      }
    } else {
      return;
    }
    auto& tenant = plan.tenants[index % groups];
    if (st.inflight[tenant] >= st.cap[tenant])
      return;
    if (from_ready)
      st.ready.pop_front();
    else
      ++st.next;
    auto item =
        make_item(*st.spec, index, plan, [&](int g) -> const host_buffer* {
          auto it = st.kept.find(index - index % groups + uint64_t(g));
          return it == st.kept.end() ? nullptr : &it->second.first;
        });
    release_inputs(st, index);
    if (!item) {
      ++st.shared->report.failed;
      note_error(st.shared->report, "item " + std::to_string(index + 1) + ": " +
                                        detail_of(item.error()));
      end_item(self, index, false);
      continue;
    }
    ++st.inflight[tenant];
    st.open.emplace(item->id, *item);
    self->send(st.rt->entry(), submit_atom::value, std::move(*item), sink);
  }
}

// An end from the runtime: the first for a submitted item counts, any other
// is a duplicate.
template <class Self> bool take_end(Self* self, uint64_t id) {
  auto& st = self->state;
  auto it = st.open.find(id);
  if (id == 0 || id > st.state.size() || it == st.open.end()) {
    ++st.shared->report.duplicates;
    return false;
  }
  --st.inflight[it->second.tenant];
  st.open.erase(it);
  return true;
}

// Writes a batch's output to its stage's file, if it has one.
void write_output(client_state& st, uint64_t index,
                  const kernels::kernel_output& out) {
  auto& plan = *st.plan;
  auto groups = uint64_t(plan.groups.size());
  auto o = plan.output_of[index % groups];
  if (o < 0)
    return;
  auto& sh = *st.shared;
  auto& op = plan.outputs[size_t(o)];
  auto batch = index / groups;
  auto view = out.view();
  caf::error err;
  if (view.size != op.offsets[batch + 1] - op.offsets[batch])
    err = make_error(
        errc::malformed_pipeline,
        op.path + ": batch " + std::to_string(batch) + " gave " +
            std::to_string(view.size) + " elements, not the " +
            std::to_string(op.offsets[batch + 1] - op.offsets[batch]) +
            " planned");
  else
    err = sh.writers[size_t(o)].write(op.offsets[batch], view);
  if (err) {
    if (sh.write_errors[size_t(o)].empty())
      sh.write_errors[size_t(o)] = detail_of(err);
    return;
  }
  ++sh.written[size_t(o)];
}

caf::behavior client_impl(caf::stateful_actor<client_state>* self,
                          const pb::PipelineSpec* spec, actors::runtime* rt,
                          std::shared_ptr<run_shared> shared,
                          std::shared_ptr<const batch_plan> plan,
                          std::map<std::string, uint64_t> cap,
                          std::shared_ptr<std::atomic<bool>> cancel) {
  auto& st = self->state;
  st.cancel = std::move(cancel);
  st.spec = spec;
  st.rt = rt;
  st.shared = std::move(shared);
  st.plan = std::move(plan);
  st.cap = std::move(cap);
  st.state.assign(st.plan->items(), item_state::open);
  st.faults.assign(spec->fault().begin(), spec->fault().end());
  std::stable_sort(st.faults.begin(), st.faults.end(), [](auto& a, auto& b) {
    return a.after_batches() < b.after_batches();
  });
  if (st.state.empty())
    finish(self);
  else
    submit_more(self);
  return {
      [=](result_atom, work_result& res) {
        auto& st = self->state;
        auto& rep = st.shared->report;
        auto it = st.open.find(res.id);
        if (it == st.open.end()) {
          take_end(self, res.id);
          return;
        }
        ++rep.completed;
        auto index = res.id - 1;
        auto diff = check_result(it->second, res.output);
        if (!diff.empty()) {
          ++rep.mismatches;
          note_error(rep, "item " + std::to_string(res.id) + " on " +
                              res.device + ": " + diff);
        }
        take_end(self, res.id);
        // A result that differs from the reference does not go into a file.
        if (diff.empty())
          write_output(st, index, res.output);
        auto groups = st.plan->groups.size();
        if (auto readers = st.plan->consumers[index % groups]; readers > 0)
          st.kept.emplace(index,
                          std::pair{to_buffer(std::move(res.output)), readers});
        end_item(self, index, true);
        submit_more(self);
      },
      [=](failed_atom, uint64_t id, caf::error& err) {
        auto& st = self->state;
        auto& rep = st.shared->report;
        if (!st.open.count(id)) {
          take_end(self, id);
          return;
        }
        if (is_rejection(code_of(err)))
          ++rep.rejected;
        else
          ++rep.failed;
        note_error(rep, "item " + std::to_string(id) + ": " + describe(err));
        take_end(self, id);
        end_item(self, id - 1, false);
        submit_more(self);
      },
  };
}

void show_progress(std::FILE* out, bool tty, uint64_t done, uint64_t total,
                   double secs, int& last_decile) {
  if (!out)
    return;
  double frac = total ? double(done) / double(total) : 1.0;
  if (tty) {
    constexpr int width = 30;
    int filled = int(frac * width);
    std::fprintf(out, "\r[%.*s%*s] %3d%% %llu/%llu items  %.0f items/s ",
                 filled, "##############################", width - filled, "",
                 int(frac * 100), (unsigned long long)done,
                 (unsigned long long)total, secs > 0 ? double(done) / secs : 0);
    if (done == total)
      std::fputc('\n', out);
    std::fflush(out);
  } else if (int decile = int(frac * 10); decile > last_decile) {
    last_decile = decile;
    std::fprintf(out, "progress: %3d%% %llu/%llu items\n", decile * 10,
                 (unsigned long long)done, (unsigned long long)total);
    std::fflush(out);
  }
}

} // namespace

pb::RuntimeConfig config_for(const pb::PipelineSpec& spec) {
  if (spec.has_runtime())
    return spec.runtime();
  auto cfg = actors::default_config();
  actors::add_sim_gpus(cfg, 4);
  return cfg;
}

namespace {

// The stages of a group as messages name them: "'a' -> 'b'".
std::string chain_names(const pb::PipelineSpec& spec,
                        const std::vector<int>& group) {
  std::string names;
  for (auto i : group)
    names += (names.empty() ? "'" : " -> '") + spec.stage(i).name() + "'";
  return names;
}

caf::error bad_stage(const pb::Stage& st, const std::string& what) {
  return make_error(errc::malformed_pipeline,
                    "stage '" + st.name() + "': " + what);
}

// The kernel a stage runs: by name (registered now) or from the enum.
caf::expected<kernel_id> kernel_of(const pb::Stage& st) {
  if (st.kernel_name().empty()) {
    auto id = static_cast<kernel_id>(st.kernel());
    if (st.kernel() <= 0 || st.kernel() > 255 || kernels::find(id) == nullptr)
      return bad_stage(st, "names no kernel (kernel_name, or kernel of the "
                           "first catalog)");
    return id;
  }
  if (auto id = kernels::parse_kernel(st.kernel_name()))
    return *id;
  return bad_stage(st, "no kernel named '" + st.kernel_name() +
                           "' is registered (`cohort kernel list` lists "
                           "them; a bundle's kernels register when the "
                           "runtime config's kernel_bundles loads it)");
}

// Most bytes the files read whole may hold together.
constexpr uint64_t max_whole_bytes = uint64_t{2} << 30;

// A path as the file system resolves it (symbolic links, "..", "./"), to
// tell when two names are one file; the path itself when it cannot.
std::string canonical(const std::string& path) {
  std::error_code ec;
  auto c = std::filesystem::weakly_canonical(path, ec);
  return ec ? path : c.string();
}

// The files a spec reads, by canonical path: each opened once, and a file
// read whole read once.
struct opened_files {
  struct entry {
    std::shared_ptr<npy::reader> reader;
    host_buffer whole;
  };
  std::map<std::string, entry> by_path;
  uint64_t whole_bytes = 0;
};

// Plans one stage's inputs (the random ones, the files, the stages it
// reads from); `group_of` maps earlier stages to their groups.
caf::error plan_inputs(const pb::PipelineSpec& spec, int i, batch_plan& plan,
                       const std::vector<int>& group_of, opened_files& opened) {
  auto& st = spec.stage(i);
  auto& sp = plan.stages[size_t(i)];
  auto* def = kernels::find(sp.kernel);
  auto& params = def->signature.inputs;
  bool chained = st.chain();
  if (st.input_size() == 0) {
    auto sizes = random_sizes(st, sp.kernel);
    if (!sizes)
      return sizes.error();
    for (size_t j = 0; j < sizes->size(); ++j)
      if (!chained || j != sp.chain_slot)
        sp.inputs.push_back(random_input((*sizes)[j]));
    return caf::none;
  }
  auto want = params.size() - (chained ? 1 : 0);
  if (size_t(st.input_size()) != want) {
    std::string names;
    for (size_t j = 0; j < params.size(); ++j)
      if (!chained || j != sp.chain_slot)
        names += (names.empty() ? "" : ", ") + params[j].name;
    return bad_stage(
        st, def->name + " takes " + std::to_string(want) + " input(s)" +
                (chained ? " besides the chained one" : "") + " (" + names +
                "), the stage names " + std::to_string(st.input_size()));
  }
  for (auto& in : st.input()) {
    input_plan ip;
    if (in.has_stage()) {
      int producer = -1;
      for (int j = 0; j < i; ++j)
        if (spec.stage(j).name() == in.stage())
          producer = j;
      if (producer < 0)
        return bad_stage(st, "reads from stage '" + in.stage() +
                                 "', but no stage before it has that name");
      ip.kind = input_plan::source::stage;
      ip.producer = group_of[size_t(producer)];
      if (ip.producer == int(plan.groups.size()) - 1 && chained)
        return bad_stage(st, "reads from stage '" + in.stage() +
                                 "' of its own chain; chain_input takes the "
                                 "previous stage's output");
      if (producer + 1 < spec.stage_size() && spec.stage(producer + 1).chain())
        return bad_stage(st, "reads from stage '" + in.stage() +
                                 "', whose output stays on the device for "
                                 "the stage chained after it; read from the "
                                 "chain's last stage");
      ip.type = kernels::output_type(plan.stages[size_t(producer)].kernel);
      sp.inputs.push_back(std::move(ip));
      continue;
    }
    auto& f = opened.by_path[canonical(in.file())];
    if (!f.reader) {
      auto opening = npy::reader::open(in.file());
      if (!opening)
        return bad_stage(st, detail_of(opening.error()));
      f.reader = std::make_shared<npy::reader>(std::move(*opening));
    }
    auto& r = f.reader;
    auto& info = r->info();
    ip.type = info.type;
    if (in.whole()) {
      if (info.elements > max_stage_elements)
        return bad_stage(st, too_large(in.file()));
      if (f.whole.identity() == nullptr && info.elements > 0) {
        auto bytes = info.elements * kernels::element_size(info.type);
        if (opened.whole_bytes + bytes > max_whole_bytes)
          return bad_stage(st, "the files read whole would hold more than " +
                                   human_bytes(max_whole_bytes) + " in all");
        auto all = r->rows(0, info.rows);
        if (!all)
          return bad_stage(st, detail_of(all.error()));
        opened.whole_bytes += bytes;
        f.whole = std::move(*all);
      }
      ip.kind = input_plan::source::whole;
      ip.data = f.whole;
      sp.inputs.push_back(std::move(ip));
      continue;
    }
    if (info.shape.empty())
      return bad_stage(st, in.file() + " holds one value (a 0-d array); "
                                       "read it whole");
    if (!plan.files.empty() && info.rows != plan.rows)
      return bad_stage(st, in.file() + " has " + std::to_string(info.rows) +
                               " rows, " + plan.files[0]->path() + " " +
                               std::to_string(plan.rows) +
                               ": files split into batches must have the "
                               "same rows");
    plan.rows = info.rows;
    ip.kind = input_plan::source::split;
    ip.rows_arg = in.rows_arg().empty() ? 0 : in.rows_arg()[0];
    auto found = std::find(plan.files.begin(), plan.files.end(), r);
    ip.file = size_t(found - plan.files.begin());
    if (found == plan.files.end())
      plan.files.push_back(r);
    sp.inputs.push_back(std::move(ip));
  }
  return caf::none;
}

// Checks every batch's stages as the runtime will (types, shapes,
// arguments) and plans the output files' offsets.
caf::error plan_batches(const pb::PipelineSpec& spec, batch_plan& plan) {
  auto groups = plan.groups.size();
  std::vector<uint64_t> out_len(groups);
  for (auto& op : plan.outputs)
    op.offsets.assign(1, 0);
  // Without split files every batch has the same shapes: check one.
  uint64_t distinct = plan.files.empty() ? 1 : plan.batches;
  for (uint64_t b = 0; b < distinct; ++b) {
    uint64_t rows = plan.files.empty() ? 0 : plan.rows_of(b).second;
    for (size_t g = 0; g < groups; ++g) {
      uint64_t previous = 0;
      kernels::dtype previous_type = kernels::dtype::f32;
      for (auto s : plan.groups[g]) {
        auto& st = spec.stage(s);
        auto& sp = plan.stages[size_t(s)];
        auto where = [&](const std::string& what) {
          // A chain is named whole, and the stage at fault in it.
          auto names = chain_names(spec, plan.groups[g]);
          return make_error(
              errc::malformed_pipeline,
              (plan.groups[g].size() > 1
                   ? "stages " + names + ", at '" + st.name() + "'"
                   : "stage '" + st.name() + "'") +
                  (plan.files.empty() ? std::string{}
                                      : ", batch " + std::to_string(b)) +
                  ": " + what);
        };
        auto args = sp.args;
        kernels::input_shape lens;
        kernels::small_vector<kernels::dtype, 8> types;
        size_t next_input = 0;
        auto slots = kernels::input_count(sp.kernel);
        for (size_t j = 0; j < slots; ++j) {
          if (s != plan.groups[g][0] && j == sp.chain_slot) {
            lens.push_back(previous);
            types.push_back(previous_type);
            continue;
          }
          if (next_input >= sp.inputs.size())
            return where("a chained stage's kernel takes at least two inputs");
          auto& in = sp.inputs[next_input++];
          uint64_t n = 0;
          switch (in.kind) {
          case input_plan::source::random:
            n = in.length;
            break;
          case input_plan::source::whole:
            n = in.data.size();
            break;
          case input_plan::source::split:
            n = rows * plan.files[in.file]->info().row_elements;
            set_rows_arg(args, in.rows_arg, rows);
            if (n > max_stage_elements)
              return where(too_large(plan.files[in.file]->path() +
                                     "'s share of a batch") +
                           "; set batch_rows lower");
            break;
          case input_plan::source::stage:
            n = out_len[size_t(in.producer)];
            if (n > max_stage_elements)
              return where(too_large(
                  "the output it reads from stage '" +
                  spec.stage(plan.groups[size_t(in.producer)].back()).name() +
                  "'"));
            break;
          }
          lens.push_back(n);
          types.push_back(in.type);
        }
        if (auto why = kernels::check_types(sp.kernel, types); !why.empty())
          return where(why);
        if (auto why = kernels::validate(sp.kernel, args, lens); !why.empty())
          return where(why);
        previous = kernels::output_elements(sp.kernel, args, lens);
        previous_type = kernels::output_type(sp.kernel);
      }
      out_len[g] = previous;
      if (auto o = plan.output_of[g]; o >= 0) {
        auto& offs = plan.outputs[size_t(o)].offsets;
        offs.push_back(offs.back() + previous);
      }
    }
  }
  for (auto& op : plan.outputs) {
    if (plan.files.empty()) {
      auto per = op.offsets.back();
      op.offsets.resize(plan.batches + 1);
      for (uint64_t b = 0; b <= plan.batches; ++b)
        op.offsets[b] = b * per;
    }
    auto& st = spec.stage(plan.groups[size_t(op.group)].back());
    auto total = op.offsets.back();
    uint64_t columns = std::max(1u, st.output_columns());
    if (total % columns != 0)
      return bad_stage(st, "its outputs have " + std::to_string(total) +
                               " elements in all, not a multiple of "
                               "output_columns " +
                               std::to_string(columns));
    op.shape = columns > 1 ? std::vector<uint64_t>{total / columns, columns}
                           : std::vector<uint64_t>{total};
  }
  return caf::none;
}

// A spec's stages grouped into items and checked (kernels, inputs, every
// batch's shapes) before anything runs. Kernels named by kernel_name must
// be registered by now.
caf::expected<std::shared_ptr<batch_plan>>
check_spec(const pb::PipelineSpec& spec) {
  auto out = std::make_shared<batch_plan>();
  auto& plan = *out;
  std::vector<int> group_of;
  opened_files opened;
  for (int i = 0; i < spec.stage_size(); ++i) {
    auto& st = spec.stage(i);
    auto id = kernel_of(st);
    if (!id)
      return id.error();
    stage_plan sp;
    sp.kernel = *id;
    sp.args = args_of(st, *id);
    sp.chain_slot = st.chain_input();
    plan.stages.push_back(std::move(sp));
    if (st.gang() > 1 &&
        (*id != kernel_id::gemm || st.chain() ||
         (i + 1 < spec.stage_size() && spec.stage(i + 1).chain())))
      return bad_stage(st, "a gang (gang > 1) is a gemm stage of its own, "
                           "not chained");
    if (st.chain()) {
      if (plan.groups.empty())
        return make_error(errc::malformed_pipeline,
                          "stage '" + st.name() +
                              "' is chained, but no stage comes before it");
      if (st.chain_input() >= kernels::input_count(*id))
        return bad_stage(st, "chain_input " + std::to_string(st.chain_input()) +
                                 " is not an input of its kernel");
      if (st.priority() != 0)
        return bad_stage(st, "a chained stage runs in the first stage's "
                             "item, with its priority: set priority there");
    } else {
      plan.groups.emplace_back();
    }
    plan.groups.back().push_back(i);
    group_of.push_back(int(plan.groups.size()) - 1);
    if (auto err = plan_inputs(spec, i, plan, group_of, opened))
      return err;
  }
  auto groups = plan.groups.size();
  plan.producers.resize(groups);
  plan.consumers.assign(groups, 0);
  plan.output_of.assign(groups, -1);
  for (size_t g = 0; g < groups; ++g) {
    for (auto s : plan.groups[g])
      for (auto& in : plan.stages[size_t(s)].inputs)
        if (in.kind == input_plan::source::stage &&
            std::find(plan.producers[g].begin(), plan.producers[g].end(),
                      in.producer) == plan.producers[g].end()) {
          plan.producers[g].push_back(in.producer);
          ++plan.consumers[size_t(in.producer)];
        }
    auto& first = spec.stage(plan.groups[g][0]);
    auto tenant = first.tenant().empty() ? spec.tenant() : first.tenant();
    plan.tenants.push_back(tenant.empty() ? "default" : tenant);
    for (auto s : plan.groups[g]) {
      auto& st = spec.stage(s);
      if (st.output().empty())
        continue;
      if (s != plan.groups[g].back())
        return bad_stage(st, "its output stays on the device for the stage "
                             "chained after it; write the chain's last "
                             "stage's output instead");
      auto path = canonical(st.output());
      auto part = canonical(st.output() + ".part");
      for (auto& op : plan.outputs)
        if (canonical(op.path) == path)
          return bad_stage(st, "another stage writes " + st.output() + " too");
      if (opened.by_path.count(path) || opened.by_path.count(part))
        return bad_stage(st, st.output() + " is an input of the pipeline");
      plan.output_of[g] = int(plan.outputs.size());
      output_plan op;
      op.group = int(g);
      op.path = st.output();
      op.type = kernels::output_type(plan.stages[size_t(s)].kernel);
      plan.outputs.push_back(std::move(op));
    }
  }
  // How many batches: from the files' rows, or as the spec says.
  plan.batch_rows = spec.batch_rows();
  if (plan.files.empty()) {
    if (spec.batches() == 0)
      return make_error(errc::malformed_pipeline,
                        "batch_rows is for stages that read files split "
                        "into batches, and no stage does: set batches");
    plan.batches = spec.batches();
  } else {
    if (plan.rows == 0)
      return make_error(errc::malformed_pipeline,
                        plan.files[0]->path() + " has no rows");
    if (plan.batch_rows > 0) {
      plan.batches = plan.rows / plan.batch_rows +
                     (plan.rows % plan.batch_rows != 0 ? 1 : 0);
      if (spec.batches() > 0 && spec.batches() != plan.batches)
        return make_error(
            errc::malformed_pipeline,
            "batches is " + std::to_string(spec.batches()) + ", but " +
                std::to_string(plan.rows) + " rows in batches of " +
                std::to_string(plan.batch_rows) + " make " +
                std::to_string(plan.batches) + " (leave batches out)");
    } else {
      plan.batches = spec.batches();
      if (plan.rows < plan.batches)
        return make_error(errc::malformed_pipeline,
                          std::to_string(plan.batches) + " batches, but " +
                              plan.files[0]->path() + " has only " +
                              std::to_string(plan.rows) + " rows");
    }
  }
  if (plan.batches > max_pipeline_items / std::max<size_t>(groups, 1))
    return make_error(errc::malformed_pipeline,
                      std::to_string(plan.batches) + " batches of " +
                          std::to_string(groups) + " items are more than " +
                          std::to_string(max_pipeline_items) + " items");
  for (auto& f : spec.fault())
    if (f.after_batches() > plan.batches)
      return make_error(errc::malformed_pipeline,
                        "a fault after batch " +
                            std::to_string(f.after_batches()) +
                            " never happens: the pipeline has " +
                            std::to_string(plan.batches) + " batches");
  if (auto err = plan_batches(spec, plan))
    return err;
  // Probe the first batch's items that read no stage: what the runtime
  // checks of a whole item (gangs, chains) is checked here too.
  for (size_t g = 0; g < groups; ++g) {
    if (!plan.producers[g].empty())
      continue;
    auto probe = make_item(spec, g, plan, nullptr);
    if (!probe)
      return probe.error();
    if (auto why = validate_item(*probe); !why.empty()) {
      auto names = chain_names(spec, plan.groups[g]);
      return make_error(errc::malformed_pipeline,
                        "stage " + names + ": " + why);
    }
  }
  return out;
}

// Streams the spec's batches through `rt` until every item ended.
caf::expected<pipeline_report>
drive(caf::actor_system& sys, actors::runtime& rt, const pb::RuntimeConfig& cfg,
      const pb::PipelineSpec& spec, std::shared_ptr<batch_plan> plan,
      const run_options& opts) {
  for (auto& f : spec.fault())
    if (auto err = chaos::check(rt, fault_of(f)))
      return make_error(errc::malformed_pipeline, describe(err));
  // Each tenant's window: the spec's, capped by the tenant's in-flight limit.
  std::map<std::string, uint64_t> cap;
  uint64_t window = spec.window() ? spec.window() : 64;
  for (auto& g : cfg.tenant())
    cap[g.tenant()] = g.max_inflight()
                          ? std::min<uint64_t>(window, g.max_inflight())
                          : window;
  for (auto& tenant : plan->tenants)
    cap.emplace(tenant, window); // unknown tenants: their items get rejected
  auto shared = std::make_shared<run_shared>();
  for (auto& op : plan->outputs) {
    auto w = npy::writer::create(op.path, op.type, op.shape);
    if (!w)
      return w.error();
    shared->writers.push_back(std::move(*w));
  }
  shared->written.assign(plan->outputs.size(), 0);
  shared->write_errors.assign(plan->outputs.size(), {});
  auto& rep = shared->report;
  rep.name = spec.name();
  rep.items = plan->items();
  auto finished = shared->finished.get_future();
  // The page's plots sample the balancer's counters as the run goes.
  bool sample = !opts.report_html_path.empty();
  if (sample)
    rep.timeline.set_devices(rt.devices());
  auto start = clock::now();
  sys.spawn(client_impl, &spec, &rt, shared,
            std::shared_ptr<const batch_plan>{plan}, cap, opts.cancel);
  bool tty = opts.progress && ::isatty(::fileno(opts.progress));
  int last_decile = 0;
  auto look = [&] {
    if (!sample)
      return;
    auto secs = std::chrono::duration<double>(clock::now() - start).count();
    if (auto st = rt.placement_stats()) {
      // A GPU a rescan added joins the plots.
      if (st->devices.size() > rep.timeline.devices())
        rep.timeline.grow(rt.devices());
      rep.timeline.add(secs, *st);
    }
  };
  while (finished.wait_for(std::chrono::milliseconds(sample ? 20 : 100)) !=
         std::future_status::ready) {
    double secs = std::chrono::duration<double>(clock::now() - start).count();
    show_progress(opts.progress, tty, shared->ended.load(), rep.items, secs,
                  last_decile);
    look();
  }
  look();
  // The client has quit: the output files are whole, or are not kept.
  for (size_t o = 0; o < plan->outputs.size(); ++o) {
    auto& op = plan->outputs[o];
    auto& w = shared->writers[o];
    std::string why = shared->write_errors[o];
    if (why.empty() && shared->written[o] < plan->batches)
      why = std::to_string(plan->batches - shared->written[o]) + " of " +
            std::to_string(plan->batches) + " batches did not end well";
    if (why.empty())
      if (auto err = w.commit())
        why = detail_of(err);
    if (!why.empty()) {
      w.discard();
      rep.outputs_not_written.push_back(op.path + ": " + why);
    } else {
      std::string shape;
      for (auto d : op.shape)
        shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      rep.outputs_written.push_back(
          op.path + " (" + std::string{kernels::name(op.type)} + ", shape (" +
          shape + (op.shape.size() == 1 ? ",)" : ")") + ")");
    }
  }
  rep.seconds = std::chrono::duration<double>(clock::now() - start).count();
  show_progress(opts.progress, tty, rep.items, rep.items, rep.seconds,
                last_decile);
  rep.lost = rep.items - shared->ended.load() - rep.not_submitted;
  if (auto s = rt.placement_stats())
    rep.placement = std::move(*s);
  if (auto s = rt.admission_stats())
    rep.admission = std::move(*s);
  if (auto m = rt.memory_stats()) {
    for (auto& s : *m) {
      if (s.capacity == 0)
        continue;
      rep.leaked += s.live_allocations;
      rep.memory.push_back(std::move(s));
    }
  }
  auto xids = rt.xid_errors();
  auto infos = rt.devices();
  for (size_t i = 0; i < xids.size() && i < infos.size(); ++i)
    if (xids[i].first > 0)
      rep.xids.push_back({infos[i].name, xids[i].first, xids[i].second});
  rep.audit_path = rt.audit_path();
  return rep;
}

} // namespace

caf::error check_stages(const pb::PipelineSpec& spec) {
  auto checked = check_spec(spec);
  return checked ? caf::none : checked.error();
}

caf::expected<pb::RuntimeConfig> runtime_config_of(const pb::PipelineSpec& spec,
                                                   const run_options& opts) {
  pb::RuntimeConfig cfg = config_for(spec);
  if (!opts.config_path.empty()) {
    auto loaded = load_config(opts.config_path);
    if (!loaded)
      return loaded.error();
    cfg = std::move(*loaded);
  }
  if (!opts.audit_path.empty())
    cfg.set_audit_path(opts.audit_path);
  if (!opts.scheduler.empty())
    if (auto err = apply_scheduler_arg(cfg, opts.scheduler))
      return err;
  if (auto err = config::check_config(cfg))
    return err;
  return cfg;
}

namespace {

// A file `cohort run` writes when the run ends (--trace, --report-html).
// It is checked before the run (one that cannot be written is refused
// before anything runs) without losing what an existing one holds; a run
// that does not end leaves no file it made.
class run_file {
public:
  caf::error open(const std::string& path, const char* option) {
    existed_ = ::access(path.c_str(), F_OK) == 0;
    auto* f = std::fopen(path.c_str(), "a");
    if (f == nullptr)
      return make_error(errc::invalid_arguments,
                        std::string{option} + ": cannot write '" + path +
                            "': " + std::strerror(errno));
    std::fclose(f);
    path_ = path;
    return caf::none;
  }

  bool wanted() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  void discard() {
    if (!path_.empty() && !existed_)
      std::remove(path_.c_str());
    path_.clear();
  }

  // Writes `text`; empty, or why it could not (then the file goes).
  std::string write(const std::string& text) {
    auto* f = std::fopen(path_.c_str(), "w");
    bool ok = f != nullptr &&
              std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (f != nullptr)
      ok = std::fclose(f) == 0 && ok;
    if (ok)
      return {};
    std::string why = "writing " + path_ + " failed: " + std::strerror(errno);
    std::remove(path_.c_str());
    return why;
  }

private:
  std::string path_;
  bool existed_ = false;
};

// Stops the runtime's trace and writes it; what went wrong goes in the
// report (the run then fails).
void write_trace(actors::runtime& rt, run_file& file, pipeline_report& rep) {
  rep.trace_path = file.path();
  auto x = rt.trace(true);
  if (!x) {
    rep.trace_error = "the trace could not be taken: " + describe(x.error());
    file.discard();
    return;
  }
  rep.trace_error = file.write(chrome_trace_json(*x));
  if (rep.trace_error.empty()) {
    rep.trace_events = x->events.size();
    rep.trace_dropped = x->dropped;
  }
}

} // namespace

caf::expected<pipeline_report> run_pipeline(caf::actor_system& sys,
                                            const pb::PipelineSpec& spec,
                                            const run_options& opts) {
  auto made = runtime_config_of(spec, opts);
  if (!made)
    return made.error();
  auto& cfg = *made;
  // Check every stage before anything runs; a stage that names a kernel
  // of a bundle the config loads is checked once the runtime has loaded it.
  bool unresolved =
      std::any_of(spec.stage().begin(), spec.stage().end(), [](auto& st) {
        return !st.kernel_name().empty() &&
               !kernels::parse_kernel(st.kernel_name());
      });
  caf::expected<std::shared_ptr<batch_plan>> checked{nullptr};
  if (!unresolved) {
    checked = check_spec(spec);
    if (!checked)
      return checked.error();
  }
  // Files that cannot be written are refused before anything runs.
  if (!opts.trace_path.empty() &&
      (opts.trace_events == 0 || opts.trace_events > max_trace_events))
    return make_error(errc::invalid_arguments,
                      "--trace-events is 1 to " +
                          std::to_string(max_trace_events) + ", not " +
                          std::to_string(opts.trace_events));
  if (!opts.trace_path.empty() && !opts.report_html_path.empty()) {
    std::error_code e1, e2;
    auto a = std::filesystem::weakly_canonical(opts.trace_path, e1);
    auto b = std::filesystem::weakly_canonical(opts.report_html_path, e2);
    if (!e1 && !e2 && a == b)
      return make_error(errc::invalid_arguments,
                        "--trace and --report-html name the same file");
  }
  run_file trace, page;
  if (!opts.trace_path.empty())
    if (auto err = trace.open(opts.trace_path, "--trace"))
      return err;
  if (!opts.report_html_path.empty())
    if (auto err = page.open(opts.report_html_path, "--report-html")) {
      trace.discard();
      return err;
    }
  auto give_up = [&](caf::error err) {
    trace.discard();
    page.discard();
    return err;
  };
  auto rt = actors::runtime::start(sys, cfg);
  if (!rt)
    return give_up(rt.error());
  if (unresolved)
    checked = check_spec(spec);
  caf::error refused = checked ? caf::error{} : checked.error();
  if (!refused && trace.wanted())
    refused = (*rt)->start_trace(opts.trace_events);
  if (refused) {
    (*rt)->stop();
    return give_up(std::move(refused));
  }
  auto rep = drive(sys, **rt, cfg, spec, std::move(*checked), opts);
  if (!rep) {
    (*rt)->stop();
    return give_up(rep.error());
  }
  if (trace.wanted())
    write_trace(**rt, trace, *rep);
  auto flushed = (*rt)->flush_audit();
  auto stats = (*rt)->audit_stats();
  (*rt)->stop();
  rep->audit = audit::audit_log::verify(rep->audit_path);
  if (stats)
    rep->audit_run_records = stats->last_seq - stats->opened_at_seq;
  if (!flushed)
    rep->audit_unwritten = describe(flushed.error());
  else if (stats && stats->dropped > 0)
    rep->audit_unwritten = std::to_string(stats->dropped) +
                           " records dropped while the log could not be "
                           "written";
  // A log that missed records of this run does not vouch for it.
  if (!rep->audit_unwritten.empty())
    rep->audit.ok = false;
  if (page.wanted()) {
    rep->report_html_path = page.path();
    rep->report_html_error = page.write(report_html(*rep));
  }
  return rep;
}

caf::expected<pipeline_report> run_pipeline_on(caf::actor_system& sys,
                                               actors::runtime& rt,
                                               const pb::RuntimeConfig& cfg,
                                               const pb::PipelineSpec& spec,
                                               const run_options& opts) {
  auto checked = check_spec(spec);
  if (!checked)
    return checked.error();
  return drive(sys, rt, cfg, spec, std::move(*checked), opts);
}

void print_report(std::FILE* out, const pipeline_report& r) {
  auto u = [](uint64_t x) { return (unsigned long long)x; };
  std::fprintf(out, "\n== cohort run: %s ==\n", terminal_text(r.name).c_str());
  std::fprintf(out,
               "items       %llu submitted, %llu completed, %llu failed, "
               "%llu rejected, %llu lost, %llu duplicated\n",
               u(r.items - r.not_submitted), u(r.completed), u(r.failed),
               u(r.rejected), u(r.lost), u(r.duplicates));
  if (r.skipped > 0)
    std::fprintf(out,
                 "            %llu not run: a stage they read from failed "
                 "in their batch\n",
                 u(r.skipped));
  if (r.not_submitted > 0)
    std::fprintf(out,
                 "            %llu not submitted: the run was stopped; those "
                 "submitted ended\n",
                 u(r.not_submitted));
  std::fprintf(out, "time        %.3f s, %.0f items/s\n", r.seconds,
               r.seconds > 0 ? double(r.items - r.not_submitted) / r.seconds
                             : 0.0);
  std::fprintf(out, "\n%-8s %-5s %-10s %-11s %9s %7s %11s %6s %10s %6s %9s\n",
               "device", "kind", "", "status", "items", "share", "busy ms",
               "util", "peak queue", "lost", "restarts");
  uint64_t total = 0;
  for (auto& d : r.placement.devices)
    total += d.completed;
  for (auto& d : r.placement.devices)
    std::fprintf(
        out,
        "%-8s %-5s %-10s %-11s %9llu %6.1f%% %11.1f %5.0f%% %10llu %6u %9u\n",
        d.name.c_str(), d.kind.c_str(), d.simulated ? "simulated" : "",
        to_string(d.status), u(d.completed),
        total ? 100.0 * double(d.completed) / double(total) : 0.0,
        double(d.busy_ns) / 1e6, 100 * d.utilization, u(d.max_queued), d.losses,
        d.restarts);
  std::fprintf(
      out,
      "\nplacement          %llu waiting at the peak, %llu exploration "
      "runs, %llu merged launches of %llu items, %llu gangs (%llu "
      "waited for devices)\n",
      u(r.placement.max_waiting), u(r.placement.explored),
      u(r.placement.batches), u(r.placement.batched_items),
      u(r.placement.gangs), u(r.placement.gang_waits));
  if (!r.memory.empty()) {
    std::fprintf(out, "\n%-8s %10s %10s %10s %11s %9s %9s  %s\n", "memory",
                 "capacity", "peak used", "pool held", "allocations", "refused",
                 "zeroed", "leaks");
    for (auto& m : r.memory) {
      uint64_t refused = 0;
      for (auto& [why, n] : m.refused)
        refused += n;
      std::fprintf(
          out, "%-8s %10s %10s %10s %11llu %9llu %9s  %s\n", m.device.c_str(),
          human_bytes(m.capacity).c_str(), human_bytes(m.peak_used).c_str(),
          human_bytes(m.peak_held).c_str(), u(m.allocations), u(refused),
          m.zero_on_free ? "yes" : "no",
          m.live_allocations == 0
              ? "none"
              : (std::to_string(m.live_allocations) + " LEAKED").c_str());
    }
  }
  std::fprintf(out, "\nCPU fallbacks      %llu (retries %llu)\n",
               u(r.placement.fallbacks), u(r.placement.retries));
  std::fprintf(out, "quota rejections   %llu", u(r.admission.rejected));
  for (auto& [why, n] : r.admission.rejected_by_reason)
    std::fprintf(out, "  %s=%llu", why.c_str(), u(n));
  std::fprintf(out, "\n");
  if (r.admission.held + r.admission.memory_waits +
          r.admission.memory_fallbacks + r.admission.timeouts >
      0)
    std::fprintf(out,
                 "held by limits     %llu held back, %llu waited for device "
                 "memory, %llu ran on a CPU for memory, %llu timed out\n",
                 u(r.admission.held), u(r.admission.memory_waits),
                 u(r.admission.memory_fallbacks), u(r.admission.timeouts));
  for (auto& f : r.faults)
    std::fprintf(out, "fault injected     %s\n", f.c_str());
  for (auto& x : r.xids)
    std::fprintf(out, "Xid errors         %s: %llu (the last Xid %u)\n",
                 x.device.c_str(), u(x.errors), x.last);
  if (!r.report_html_error.empty())
    std::fprintf(out, "report NOT written %s\n", r.report_html_error.c_str());
  else if (!r.report_html_path.empty())
    std::fprintf(out, "report written     %s (HTML, with plots)\n",
                 r.report_html_path.c_str());
  if (!r.trace_error.empty())
    std::fprintf(out, "trace NOT written  %s\n", r.trace_error.c_str());
  else if (!r.trace_path.empty())
    std::fprintf(out,
                 "trace written      %s: %llu events%s (open it in "
                 "https://ui.perfetto.dev)\n",
                 r.trace_path.c_str(), u(r.trace_events),
                 r.trace_dropped == 0
                     ? ""
                     : (", " + std::to_string(r.trace_dropped) +
                        " more not kept past --trace-events")
                           .c_str());
  if (r.audit.ok)
    std::fprintf(out,
                 "audit chain        verified: %llu records in %s (%llu from "
                 "this run), head %s\n",
                 u(r.audit.good_records), r.audit_path.c_str(),
                 u(r.audit_run_records),
                 audit::to_hex(r.audit.head).substr(0, 16).c_str());
  else if (!r.audit_unwritten.empty())
    std::fprintf(out, "audit chain        INCOMPLETE: %s (%s)\n",
                 r.audit_unwritten.c_str(), r.audit_path.c_str());
  else
    std::fprintf(out, "audit chain        BROKEN at record %llu of %s: %s\n",
                 u(r.audit.first_bad), r.audit_path.c_str(),
                 r.audit.reason.c_str());
  std::fprintf(out,
               "results            %llu of %llu match the CPU reference%s\n",
               u(r.completed - r.mismatches), u(r.completed),
               r.mismatches ? " (MISMATCHES)" : "");
  for (auto& o : r.outputs_written)
    std::fprintf(out, "output written     %s\n", o.c_str());
  for (auto& o : r.outputs_not_written)
    std::fprintf(out, "output NOT written %s\n", o.c_str());
  for (auto& e : r.errors)
    std::fprintf(out, "  error: %s\n", terminal_text(e).c_str());
  std::fprintf(out, "verdict            %s\n",
               r.ok() ? "OK: every item ended exactly once"
                      : "FAILED: see above");
}

} // namespace cohort::tools
