#include "chaos/invariants.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "audit/audit_log.hpp"
#include "messages/errc.hpp"

namespace cohort::chaos {

namespace {

constexpr size_t max_violations = 50;

struct checker {
  verdict v;

  void fail(std::string what) {
    if (v.violations.size() < max_violations)
      v.violations.push_back(std::move(what));
    else if (v.violations.size() == max_violations)
      v.violations.push_back("... (more)");
  }

  // A failure that explains others: it goes first, even past the cap.
  void fail_first(std::string what) {
    v.violations.insert(v.violations.begin(), std::move(what));
    if (v.violations.size() > max_violations + 1)
      v.violations.erase(v.violations.end() - 2);
  }

  /// Items refused admission because the audit log could not be written.
  uint64_t audit_refused = 0;
};

// What the audit log says about one item.
struct audit_trail {
  uint32_t admitted = 0;
  uint32_t rejected = 0;
  uint32_t completed = 0;
  uint32_t failed = 0;
  /// Placements, in order: (time, device).
  std::vector<std::pair<int64_t, std::string>> placed;
  int64_t ended_at = 0;
};

std::string key(const std::string& tenant, uint64_t id) {
  return tenant + "/" + std::to_string(id);
}

void check_ends(checker& c, const run_record& run) {
  for (auto& item : run.items) {
    auto i = run.ends.find(item.id);
    auto n = i == run.ends.end() ? 0 : i->second.size();
    auto name = "item " + std::to_string(item.id) + " (" + item.tenant + ")";
    if (n == 0) {
      ++c.v.lost;
      c.fail(name + " never ended");
      continue;
    }
    if (n > 1) {
      ++c.v.duplicated;
      c.fail(name + " ended " + std::to_string(n) + " times");
    }
    auto& end = i->second.front();
    if (run.deadline_ms > 0 && end.at_ms > run.deadline_ms) {
      ++c.v.late;
      c.fail(name + " ended " + std::to_string(end.at_ms) +
             " ms after the workload started, past the deadline of " +
             std::to_string(run.deadline_ms) + " ms");
    }
    if (end.ok) {
      ++c.v.completed;
      if (item.gang > 1)
        ++c.v.gangs_completed;
      if (auto k = run.kept.find(item.id); k != run.kept.end()) {
        auto& o = end.result.object;
        if (o.id == 0 || o.elements != k->second) {
          ++c.v.wrong_results;
          c.fail(name + " on " + end.result.device +
                 ": its output was to be kept as an object of " +
                 std::to_string(k->second) + " elements, got " +
                 (o.id == 0 ? std::string{"none"}
                            : std::to_string(o.elements) + " elements"));
        }
        continue;
      }
      if (auto why = check_result(item, end.result.output); !why.empty()) {
        ++c.v.wrong_results;
        c.fail(name + " on " + end.result.device + ": wrong result: " + why);
      }
      continue;
    }
    ++c.v.failed;
    auto code = to_string(code_of(end.error));
    ++c.v.errors_by_code[code];
    auto mine = run.allowed_by_tenant.find(item.tenant);
    // Failing closed while the log cannot be written: one failure names the
    // cause (check_audit), not one per item refused.
    if (!run.audit_unwritten.empty() &&
        code_of(end.error) == errc::audit_unavailable) {
      ++c.audit_refused;
      continue;
    }
    if (run.allowed_errors.count(code) == 0 &&
        (mine == run.allowed_by_tenant.end() || mine->second.count(code) == 0))
      c.fail(name + " ended with an error the scenario does not allow: " +
             describe(end.error));
  }
  std::set<uint64_t> submitted;
  for (auto& item : run.items)
    submitted.insert(item.id);
  for (auto& [id, ends] : run.ends) {
    if (submitted.count(id) == 0)
      c.fail("an end arrived for id " + std::to_string(id) +
             ", which was never submitted");
  }
}

void check_audit(checker& c, const run_record& run) {
  std::map<std::string, audit_trail> trails;
  std::map<std::string, int64_t> inflight;
  int64_t global = 0;
  std::vector<std::pair<int64_t, std::string>> device_events;
  std::vector<std::pair<int64_t, std::string>> device_backs;
  auto verdict = audit::audit_log::verify(
      run.audit_path, [&](const pb::AuditRecord& rec) {
        ++c.v.audit_records;
        if (rec.kind() == pb::DEVICE_EVENT) {
          if (rec.detail().rfind("device lost", 0) == 0 ||
              rec.detail().rfind("device offline", 0) == 0)
            device_events.emplace_back(rec.time_ns(), rec.device());
          else if (rec.detail().rfind("device restarted", 0) == 0)
            device_backs.emplace_back(rec.time_ns(), rec.device());
          return;
        }
        auto& t = trails[key(rec.tenant(), rec.work_id())];
        switch (rec.kind()) {
        case pb::ADMITTED:
          ++t.admitted;
          ++global;
          if (auto cap = run.inflight_cap.find(rec.tenant());
              cap != run.inflight_cap.end() && cap->second > 0 &&
              ++inflight[rec.tenant()] > cap->second)
            c.fail("tenant '" + rec.tenant() + "' had " +
                   std::to_string(inflight[rec.tenant()]) +
                   " items in flight, past its cap of " +
                   std::to_string(cap->second));
          if (run.global_inflight_cap > 0 && global > run.global_inflight_cap)
            c.fail(std::to_string(global) +
                   " items in flight, past the runtime's cap");
          break;
        case pb::REJECTED:
          ++t.rejected;
          break;
        case pb::PLACED:
        case pb::FALLBACK:
          if (!rec.device().empty())
            t.placed.emplace_back(rec.time_ns(), rec.device());
          break;
        case pb::COMPLETED:
        case pb::FAILED:
          (rec.kind() == pb::COMPLETED ? t.completed : t.failed)++;
          t.ended_at = rec.time_ns();
          if (t.admitted > 0) {
            --global;
            if (run.inflight_cap.count(rec.tenant()))
              --inflight[rec.tenant()];
          }
          break;
        default:
          break;
        }
      });
  if (!verdict.ok)
    c.fail("the audit chain does not verify: record " +
           std::to_string(verdict.first_bad) + ": " + verdict.reason);
  // Rotation with keep_files deletes the oldest segments: an item whose
  // admission was in one has no trail, or only its end, and that is not a
  // lost record.
  bool pruned = verdict.mid_chain;
  // A log that could not be written lacks the records it could not take:
  // that is one failure, named by its cause, not one per item.
  bool unwritten = !run.audit_unwritten.empty();
  uint64_t unrecorded = 0;
  for (auto& item : run.items) {
    auto i = trails.find(key(item.tenant, item.id));
    auto name = "item " + std::to_string(item.id) + " (" + item.tenant + ")";
    if (i == trails.end() ||
        (pruned && i->second.admitted + i->second.rejected == 0)) {
      if (pruned) {
        ++c.v.audit_pruned;
        continue;
      }
      if (unwritten)
        ++unrecorded;
      else
        c.fail("the audit log has no record of " + name);
      continue;
    }
    auto& t = i->second;
    auto ends = run.ends.find(item.id);
    bool ok = ends != run.ends.end() && !ends->second.empty() &&
              ends->second.front().ok;
    if (t.admitted + t.rejected != 1) {
      c.fail(name + ": " + std::to_string(t.admitted) + " admitted and " +
             std::to_string(t.rejected) + " rejected records, expected one");
      continue;
    }
    if (t.admitted == 1 && t.completed + t.failed == 0 && unwritten) {
      ++unrecorded;
      continue;
    }
    if (t.admitted == 1 && t.completed + t.failed != 1)
      c.fail(name + ": admitted, with " +
             std::to_string(t.completed + t.failed) +
             " end records, expected one");
    if (t.rejected == 1 && t.completed + t.failed != 0)
      c.fail(name + ": rejected, yet with an end record");
    if (ok && t.completed != 1)
      c.fail(name + ": its result has no completed record");
    if (!ok && t.completed != 0)
      c.fail(name + ": failed, yet audited as completed");
  }
  if (unwritten)
    c.fail_first("the audit log could not be written (" + run.audit_unwritten +
                 "): it does not vouch for this run; " +
                 std::to_string(unrecorded) + " of " +
                 std::to_string(run.items.size()) +
                 " items have no record or no end in it, " +
                 std::to_string(c.audit_refused) +
                 " were refused admission while it failed (audit_unavailable)");
  // Recovery: the items the loss caught on the device (placed there before
  // the balancer noticed) move and end elsewhere; the last of them ending
  // closes the recovery, timed from the injection (hangs: from detection).
  // A loss injected while its device is down (lost and not yet back) is
  // absorbed by the recovery in progress: it is not a second sample, and
  // one noticed loss is timed once.
  std::set<size_t> timed;
  auto down_at = [&](const std::string& device, int64_t at) {
    int64_t lost = -1, back = -1;
    for (auto& [t, d] : device_events)
      if (d == device && t <= at)
        lost = std::max(lost, t);
    for (auto& [t, d] : device_backs)
      if (d == device && t <= at)
        back = std::max(back, t);
    return lost >= 0 && lost > back;
  };
  for (auto& loss : run.losses) {
    if (down_at(loss.device, loss.at_ns)) {
      ++c.v.absorbed_losses;
      continue;
    }
    auto d =
        std::find_if(device_events.begin(), device_events.end(), [&](auto& ev) {
          return ev.first >= loss.at_ns && ev.second == loss.device;
        });
    if (d == device_events.end())
      continue;
    if (!timed.insert(size_t(d - device_events.begin())).second) {
      ++c.v.absorbed_losses;
      continue;
    }
    auto noticed = d->first;
    auto from = loss.from_detection ? noticed : loss.at_ns;
    int64_t last_end = 0;
    for (auto& [k, t] : trails) {
      if (t.ended_at <= noticed || t.completed == 0)
        continue;
      const std::pair<int64_t, std::string>* before = nullptr;
      bool moved = false;
      for (auto& p : t.placed) {
        if (p.first <= noticed)
          before = &p;
        else if (before && before->second == loss.device)
          moved = true;
      }
      if (before && before->second == loss.device && moved)
        last_end = std::max(last_end, t.ended_at);
    }
    if (last_end > 0)
      c.v.recovery_ms.push_back(double(last_end - from) / 1e6);
  }
}

} // namespace

verdict check_invariants(const run_record& run) {
  checker c;
  c.v.items = run.items.size();
  check_ends(c, run);
  for (auto& m : run.memory_violations)
    c.fail("device memory: " + m);
  check_audit(c, run);
  return std::move(c.v);
}

double quantile(std::vector<double> xs, double q) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto rank = size_t(std::ceil(q * double(xs.size())));
  return xs[std::min(xs.size() - 1, rank == 0 ? 0 : rank - 1)];
}

} // namespace cohort::chaos
