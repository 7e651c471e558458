#include "messages/convert.hpp"

#include "messages/quota.hpp"

#include "messages/stats.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>

namespace cohort {

const char* to_string(device_kind kind) {
  switch (kind) {
  case device_kind::cpu:
    return "cpu";
  case device_kind::sim_gpu:
    return "sim";
  case device_kind::cuda_gpu:
    return "cuda";
  case device_kind::hip_gpu:
    return "hip";
  }
  return "unknown";
}

const char* to_string(link_kind kind, device_kind of) {
  switch (kind) {
  case link_kind::none:
    return "none";
  case link_kind::pcie:
    return "PCIe P2P";
  case link_kind::fabric:
    return of == device_kind::hip_gpu ? "xGMI" : "NVLink";
  }
  return "unknown";
}

const char* to_string(audit_kind kind) {
  switch (kind) {
  case audit_kind::admitted:
    return "admitted";
  case audit_kind::rejected:
    return "rejected";
  case audit_kind::placed:
    return "placed";
  case audit_kind::completed:
    return "completed";
  case audit_kind::failed:
    return "failed";
  case audit_kind::fallback:
    return "fallback";
  case audit_kind::device_event:
    return "device_event";
  case audit_kind::alert:
    return "alert";
  case audit_kind::admin:
    return "admin";
  case audit_kind::recovery:
    return "recovery";
  case audit_kind::rotated:
    return "rotated";
  case audit_kind::kernel_bundle:
    return "kernel_bundle";
  case audit_kind::object:
    return "object";
  case audit_kind::cancel:
    return "cancel";
  case audit_kind::exec_session:
    return "exec_session";
  }
  return "unknown";
}

const char* to_string(limit_policy x) {
  switch (x) {
  case limit_policy::reject:
    return "reject";
  case limit_policy::queue:
    return "queue";
  case limit_policy::cpu_fallback:
    return "cpu_fallback";
  }
  return "unknown";
}

const char* to_string(fallback_policy x) {
  switch (x) {
  case fallback_policy::allow:
    return "allow";
  case fallback_policy::wait:
    return "wait";
  case fallback_policy::fail:
    return "fail";
  }
  return "unknown";
}

const char* to_string(device_status x) {
  switch (x) {
  case device_status::available:
    return "available";
  case device_status::degraded:
    return "degraded";
  case device_status::draining:
    return "draining";
  case device_status::resetting:
    return "resetting";
  case device_status::offline:
    return "offline";
  }
  return "unknown";
}

const char* to_string(circuit_state x) {
  switch (x) {
  case circuit_state::closed:
    return "closed";
  case circuit_state::open:
    return "open";
  case circuit_state::half_open:
    return "half-open";
  }
  return "unknown";
}

int64_t wall_clock_ns() {
  using namespace std::chrono;
  return duration_cast<nanoseconds>(system_clock::now().time_since_epoch())
      .count();
}

pb::DeviceInfo to_proto(const device_info& x) {
  pb::DeviceInfo out;
  out.set_name(x.name);
  out.set_kind(static_cast<pb::DeviceKind>(x.kind));
  out.set_simulated(x.simulated);
  out.set_model(x.model);
  out.set_memory_bytes(x.memory_bytes);
  out.set_streams(x.streams);
  out.set_speed(x.speed);
  out.set_cores(x.cores);
  out.set_numa_node(x.numa_node);
  out.set_pci_bus_id(x.pci_bus_id);
  out.set_uuid(x.uuid);
  out.set_arch(x.arch);
  out.set_multiprocessors(x.multiprocessors);
  return out;
}

pb::WorkRequest to_proto(const work_item& x) {
  pb::WorkRequest out;
  out.set_id(x.id);
  out.set_tenant(x.tenant);
  out.set_kernel(static_cast<pb::Kernel>(x.kernel));
  auto* args = out.mutable_args();
  args->set_alpha(x.args.alpha);
  args->set_m(x.args.m);
  args->set_n(x.args.n);
  args->set_k(x.args.k);
  args->set_top_k(x.args.top_k);
  for (auto& in : x.inputs) {
    auto s = in.span();
    out.add_inputs()->mutable_values()->Add(s.begin(), s.end());
  }
  out.set_gang(x.gang);
  out.set_priority(x.priority);
  return out;
}

pb::WorkResult to_proto(const work_result& x) {
  pb::WorkResult out;
  out.set_id(x.id);
  out.mutable_values()->Add(x.output.values.begin(), x.output.values.end());
  out.mutable_indices()->Add(x.output.indices.begin(), x.output.indices.end());
  out.set_device(x.device);
  out.set_attempts(x.attempts);
  out.set_fallback(x.fallback);
  return out;
}

caf::expected<work_item> from_proto(const pb::WorkRequest& x) {
  if (x.kernel() > 255 || !kernels::is_known(static_cast<uint8_t>(x.kernel())))
    return make_error(errc::unknown_kernel, "kernel value " +
                                                std::to_string(x.kernel()) +
                                                " is not in the catalog");
  work_item out;
  out.id = x.id();
  out.tenant = x.tenant();
  out.kernel = static_cast<kernel_id>(x.kernel());
  out.args = {x.args().alpha(), x.args().m(), x.args().n(), x.args().k(),
              x.args().top_k()};
  for (auto& in : x.inputs())
    out.inputs.emplace_back(
        std::vector<float>(in.values().begin(), in.values().end()));
  out.gang = x.gang();
  out.priority = x.priority();
  return out;
}

namespace {

class error_collector : public google::protobuf::io::ErrorCollector {
public:
  void AddError(int line, int column, const std::string& message) override {
    if (first.empty())
      first = "line " + std::to_string(line + 1) + ", column " +
              std::to_string(column + 1) + ": " + message;
  }
  std::string first;
};

// Parses text format from `input` into `msg`; errors name `name` and the
// line and column.
caf::error parse_stream(google::protobuf::io::ZeroCopyInputStream& input,
                        const std::string& name, google::protobuf::Message& msg,
                        errc code) {
  google::protobuf::TextFormat::Parser parser;
  error_collector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.Parse(&input, &msg))
    return make_error(
        code,
        name + ": " + (errors.first.empty() ? "cannot read" : errors.first));
  return caf::none;
}

} // namespace

caf::error load_text_file(const std::string& path,
                          google::protobuf::Message& msg, errc code) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    return make_error(code, path + ": cannot open: " + std::strerror(errno));
  google::protobuf::io::FileInputStream input{fd};
  input.SetCloseOnDelete(true);
  return parse_stream(input, path, msg, code);
}

caf::error parse_text(const std::string& text, const std::string& name,
                      google::protobuf::Message& msg, errc code) {
  google::protobuf::io::ArrayInputStream input{text.data(), int(text.size())};
  return parse_stream(input, name, msg, code);
}

caf::error check_pipeline(const pb::PipelineSpec& spec,
                          const std::string& name) {
  auto bad = [&](const std::string& what) {
    return make_error(errc::malformed_pipeline, name + ": " + what);
  };
  if (spec.stage_size() == 0)
    return bad("a pipeline needs at least one stage");
  if (spec.batches() == 0 && spec.batch_rows() == 0)
    return bad("batches must be positive (or batch_rows set, for stages "
               "that read files)");
  // Bounded before anything is allocated: the runner keeps a record per
  // item and the inputs of every item in flight.
  if (spec.stage_size() > max_pipeline_stages)
    return bad("a pipeline has at most " + std::to_string(max_pipeline_stages) +
               " stages, this one " + std::to_string(spec.stage_size()));
  if (uint64_t{spec.batches()} * uint64_t(spec.stage_size()) >
      max_pipeline_items)
    return bad(
        "batches x stages is " +
        std::to_string(uint64_t{spec.batches()} * uint64_t(spec.stage_size())) +
        " items, at most " + std::to_string(max_pipeline_items));
  if (spec.window() > max_pipeline_window)
    return bad("window is " + std::to_string(spec.window()) + ", at most " +
               std::to_string(max_pipeline_window));
  for (int i = 0; i < spec.stage_size(); ++i) {
    auto& st = spec.stage(i);
    auto where = "stage " + std::to_string(i + 1) + " ('" + st.name() + "')";
    if (!st.kernel_name().empty()) {
      // Resolved when the runtime has started (bundles register kernels).
      if (st.kernel() != pb::KERNEL_UNSPECIFIED)
        return bad(where + " names its kernel twice (kernel and "
                           "kernel_name): give one");
    } else if (st.kernel() < 0 || st.kernel() > 255 ||
               !kernels::is_known(static_cast<uint8_t>(st.kernel())))
      return bad(where + " names no kernel of the catalog (kernel " +
                 std::to_string(int(st.kernel())) + ")");
    if (st.input_size() > max_stage_inputs)
      return bad(where + " has " + std::to_string(st.input_size()) +
                 " inputs, at most " + std::to_string(max_stage_inputs));
    for (auto& in : st.input()) {
      if (in.source_case() == pb::StageInput::SOURCE_NOT_SET ||
          (in.has_file() && in.file().empty()) ||
          (in.has_stage() && in.stage().empty()))
        return bad(where + ": every input names a file or a stage");
      if (!in.rows_arg().empty() && in.rows_arg() != "m" &&
          in.rows_arg() != "n" && in.rows_arg() != "k")
        return bad(where + ": rows_arg is \"m\", \"n\" or \"k\", not \"" +
                   in.rows_arg() + "\"");
      if (!in.rows_arg().empty() && (in.whole() || in.has_stage()))
        return bad(where + ": rows_arg is for a file split into batches, "
                           "not a whole file or a stage's output");
      if (in.whole() && in.has_stage())
        return bad(where + ": whole is for a file, not a stage's output");
    }
    if (st.output_columns() > 0 && st.output().empty())
      return bad(where + ": output_columns without an output file");
    if (!std::isfinite(st.args().alpha()))
      return bad(where + ": alpha must be a finite number");
    if (st.gang() > 64)
      return bad(where + ": a gang has at most 64 devices, not " +
                 std::to_string(st.gang()));
  }
  for (auto& f : spec.fault()) {
    if (f.kind() == pb::FAULT_UNSPECIFIED || !pb::FaultKind_IsValid(f.kind()) ||
        f.device().empty())
      return bad("every fault needs a device and a kind");
    if (spec.batches() > 0 && f.after_batches() > spec.batches())
      return bad("a fault after batch " + std::to_string(f.after_batches()) +
                 " never happens: the pipeline has " +
                 std::to_string(spec.batches()) + " batches");
  }
  return caf::none;
}

caf::error check_plan(const pb::AllocationPlan& plan, const std::string& name) {
  auto bad = [&](const std::string& what) {
    return make_error(errc::malformed_config, name + ": " + what);
  };
  if (plan.step_size() == 0)
    return bad("a plan needs at least one step");
  if (plan.step_size() > 1'000'000)
    return bad("a plan has at most 1000000 steps, this one " +
               std::to_string(plan.step_size()));
  for (int i = 0; i < plan.step_size(); ++i) {
    auto& st = plan.step(i);
    auto where = "step " + std::to_string(i + 1) + ": ";
    if (!st.free().empty()) {
      if (!st.tenant().empty() || !st.device().empty() || st.bytes() != 0)
        return bad(where + "a free names only the label it frees");
      continue;
    }
    if (st.tenant().empty() || st.device().empty())
      return bad(where + "an allocation needs a tenant and a device");
  }
  return caf::none;
}

caf::expected<pb::PipelineSpec> load_pipeline(const std::string& path) {
  pb::PipelineSpec spec;
  if (auto err = load_text_file(path, spec, errc::malformed_pipeline))
    return err;
  if (auto err = check_pipeline(spec, path))
    return err;
  return spec;
}

caf::expected<pb::RuntimeConfig> load_config(const std::string& path) {
  pb::RuntimeConfig cfg;
  if (auto err = load_text_file(path, cfg, errc::malformed_config))
    return err;
  return cfg;
}

caf::expected<pb::AllocationPlan> load_plan(const std::string& path) {
  pb::AllocationPlan plan;
  if (auto err = load_text_file(path, plan, errc::malformed_config))
    return err;
  if (auto err = check_plan(plan, path))
    return err;
  return plan;
}

allocation_plan from_proto(const pb::AllocationPlan& x) {
  allocation_plan out;
  out.name = x.name();
  for (auto& st : x.step())
    out.steps.push_back({st.tenant(), st.device(), st.bytes(), st.kernel(),
                         st.label(), st.free()});
  return out;
}

} // namespace cohort
