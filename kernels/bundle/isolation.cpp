#include "kernels/bundle/isolation.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>

#include "ipc/child.hpp"

namespace cohort::kernels::bundle {

namespace {

using pb::BundleProbeEvent;

/// What the child may write back: its events.
constexpr size_t max_report_bytes = 4 << 20;

/// The probe's request and the descriptors it names, in the order they are
/// placed in the child (from 3 up).
struct request {
  pb::BundleProbe msg;
  std::vector<int> fds;
  request() = default;
  request(const request&) = delete;
  request& operator=(const request&) = delete;
  ~request() {
    for (int fd : fds)
      ::close(fd);
  }
};

std::optional<refused> make_request(const checked_bundle& b,
                                    const isolation& iso, request& req) {
  // One object per blob the kernels use, with every symbol asked of it.
  std::map<std::string, pb::BundleProbe::Object*> by_path;
  auto object = [&](const std::string& path) {
    auto& o = by_path[path];
    if (o == nullptr) {
      o = req.msg.add_object();
      o->set_path(path);
      for (auto& blob : b.manifest.blob())
        if (blob.path() == path)
          o->set_kind(blob.kind());
    }
    return o;
  };
  for (auto& k : b.manifest.kernel()) {
    object(k.cpu_blob())->add_symbol(k.cpu_symbol());
    for (auto* g : {&k.cuda(), &k.hip()})
      if (!g->blob().empty())
        object(g->blob())->add_symbol(g->function());
  }
  for (auto& o : *req.msg.mutable_object()) {
    std::string why;
    auto label = "cohort-probe:" + o.path();
    int fd = ipc::memory_file(label.c_str(), b.blobs.at(o.path()), why);
    if (fd < 0)
      return refused{refusal::load_failed,
                     "cannot hand blob '" + o.path() +
                         "' to the isolated load: " + why};
    o.set_fd(3 + int(req.fds.size()));
    req.fds.push_back(fd);
  }
  for (auto& [vendor, path] : iso.plugins)
    (*req.msg.mutable_plugin())[vendor] = path;
  return std::nullopt;
}

std::string step_text(const BundleProbeEvent& e) {
  return "'" + e.path() + "' on " + e.device();
}

} // namespace

std::variant<probe_report, refused> probe(const checked_bundle& b,
                                          const isolation& iso) {
  if (iso.helper.empty())
    return refused{refusal::load_failed,
                   std::string{"no "} + probe_program +
                       " to load it in isolation (searched: " +
                       (iso.searched.empty() ? "nowhere" : iso.searched) +
                       "; set COHORT_PLUGIN_PATH to the folder holding it)"};
  request req;
  if (auto no = make_request(b, iso, req))
    return *no;
  ipc::child_request run;
  run.program = iso.helper;
  run.args = {"--parent", std::to_string(::getpid())};
  run.input = req.msg.SerializeAsString();
  run.fds = req.fds;
  run.timeout = iso.timeout;
  run.max_output = max_report_bytes;
  run.label = "cohort-probe";
  auto end = ipc::run_child(run);
  if (!end.spawn_error.empty())
    return refused{refusal::load_failed,
                   "cannot start the isolated load: " + end.spawn_error};

  // What the child said, event by event, up to where it stopped.
  auto& bytes = end.output;
  google::protobuf::io::ArrayInputStream stream{bytes.data(),
                                                int(bytes.size())};
  probe_report report;
  std::optional<BundleProbeEvent> open_step;
  std::optional<BundleProbeEvent> failed;
  std::set<std::string> answered;
  BundleProbeEvent e;
  bool clean_eof = false;
  // The parser merges into `e`: cleared before each event.
  for (e.Clear(); google::protobuf::util::ParseDelimitedFromZeroCopyStream(
           &e, &stream, &clean_eof);
       e.Clear()) {
    switch (e.kind()) {
    case BundleProbeEvent::STEP:
      open_step = e;
      break;
    case BundleProbeEvent::OK:
      open_step.reset();
      answered.insert(e.path());
      report.loaded.push_back(e.path() + " on " + e.device());
      break;
    case BundleProbeEvent::FAILED:
      open_step.reset();
      if (!failed)
        failed = e;
      break;
    case BundleProbeEvent::NOTE:
      answered.insert(e.path());
      report.notes.push_back(e.path() + ": " + e.text());
      break;
    default:
      break;
    }
  }
  auto at = open_step ? " while loading " + step_text(*open_step) : "";
  if (end.timed_out)
    return refused{refusal::load_hung, "the isolated load did not finish in " +
                                           std::to_string(iso.timeout.count()) +
                                           " ms" + at + "; it was killed"};
  if (failed)
    return refused{refusal::load_failed,
                   step_text(*failed) + ": " + failed->text()};
  auto& tail = end.stderr_tail;
  auto said = tail.empty() ? std::string{} : "; it wrote: " + tail;
  if (end.status && WIFSIGNALED(*end.status))
    return refused{refusal::load_crashed,
                   "the isolated load crashed (" +
                       ipc::signal_name(WTERMSIG(*end.status)) + ")" + at +
                       said};
  if (end.status && WEXITSTATUS(*end.status) != 0)
    return refused{refusal::load_crashed,
                   "the isolated load exited with status " +
                       std::to_string(WEXITSTATUS(*end.status)) + at + said};
  if (open_step || !clean_eof)
    return refused{refusal::load_crashed,
                   "the isolated load stopped before it finished" + at + said};
  for (auto& o : req.msg.object())
    if (answered.count(o.path()) == 0)
      return refused{refusal::load_failed,
                     "the isolated load said nothing of '" + o.path() + "'" +
                         said};
  return report;
}

} // namespace cohort::kernels::bundle
