// Conversions between the hot-path C++ types and the protobuf schemas, and
// loading of text-format files (pipelines, runtime configs).
#pragma once

#include <string>

#include <caf/expected.hpp>

#include "messages/audit_event.hpp"
#include "messages/cohort.pb.h"
#include "messages/device_info.hpp"
#include "messages/errc.hpp"
#include "messages/simulation.hpp"
#include "messages/work.hpp"

namespace cohort {

/// Device facts in schema form.
pb::DeviceInfo to_proto(const device_info& x);

/// A work item in schema form (copies the inputs).
pb::WorkRequest to_proto(const work_item& x);

/// A result in schema form.
pb::WorkResult to_proto(const work_result& x);

/// Reads a work item from its schema form; fails with unknown_kernel for a
/// kernel outside the catalog.
caf::expected<work_item> from_proto(const pb::WorkRequest& x);

/// Reads a protobuf text-format file into `msg`. Errors name the file, and the
/// line and column of a parse error; `code` is the errc to report.
caf::error load_text_file(const std::string& path,
                          google::protobuf::Message& msg, errc code);

/// Most stages, items (batches x stages) and items in flight (window) of one
/// pipeline: checked before anything is allocated.
inline constexpr int max_pipeline_stages = 256;
inline constexpr uint64_t max_pipeline_items = 10'000'000;
/// Most inputs one pipeline stage may name.
inline constexpr int max_stage_inputs = 64;
inline constexpr uint32_t max_pipeline_window = 65536;

/// Parses protobuf text format `text` into `msg`, as `load_text_file` does a
/// file's contents; errors name `name` (a path) and the line and column.
caf::error parse_text(const std::string& text, const std::string& name,
                      google::protobuf::Message& msg, errc code);

/// Checks a pipeline spec read from `name` (errc::malformed_pipeline): its
/// counts within the bounds above, known kernels, finite arguments.
caf::error check_pipeline(const pb::PipelineSpec& spec,
                          const std::string& name);

/// Checks an allocation plan read from `name` (errc::malformed_config): at
/// most 1000000 steps.
caf::error check_plan(const pb::AllocationPlan& plan, const std::string& name);

/// Loads and checks a pipeline spec file (errc::malformed_pipeline), as
/// check_pipeline does.
caf::expected<pb::PipelineSpec> load_pipeline(const std::string& path);

/// Loads and checks a runtime config file (errc::malformed_config).
caf::expected<pb::RuntimeConfig> load_config(const std::string& path);

/// Loads and checks an allocation plan file (errc::malformed_config): at
/// least one step, allocations name a tenant and a device, frees only a
/// label.
caf::expected<pb::AllocationPlan> load_plan(const std::string& path);

/// An allocation plan in its plain C++ form.
allocation_plan from_proto(const pb::AllocationPlan& x);

} // namespace cohort
