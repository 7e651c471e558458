// Reading JSON in tests the way a viewer does: any JSON object parses into a
// protobuf Struct.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

namespace cohort::test {

/// `text` as a Struct; fails the test when it is not a JSON object.
inline google::protobuf::Struct parse_json(const std::string& text) {
  google::protobuf::Struct out;
  auto st = google::protobuf::util::JsonStringToMessage(text, &out);
  INFO(st.message());
  REQUIRE(st.ok());
  return out;
}

/// Field `name` of `s`; fails the test when there is none.
inline const google::protobuf::Value& field(const google::protobuf::Struct& s,
                                            const std::string& name) {
  auto i = s.fields().find(name);
  REQUIRE(i != s.fields().end());
  return i->second;
}

/// Field `name` as a string ("" when absent) or a number (-1 when absent).
inline std::string text_of(const google::protobuf::Struct& s,
                           const std::string& name) {
  auto i = s.fields().find(name);
  return i == s.fields().end() ? std::string{} : i->second.string_value();
}

inline double number_of(const google::protobuf::Struct& s,
                        const std::string& name) {
  auto i = s.fields().find(name);
  return i == s.fields().end() ? -1 : i->second.number_value();
}

/// The events of a Chrome trace (its traceEvents), each an object.
inline std::vector<google::protobuf::Struct>
trace_events(const google::protobuf::Struct& doc) {
  std::vector<google::protobuf::Struct> out;
  for (auto& v : field(doc, "traceEvents").list_value().values()) {
    REQUIRE(v.has_struct_value());
    out.push_back(v.struct_value());
  }
  return out;
}

/// The names of a trace's processes (its process_name metadata).
inline std::vector<std::string>
process_names(const std::vector<google::protobuf::Struct>& events) {
  std::vector<std::string> out;
  for (auto& e : events)
    if (text_of(e, "ph") == "M" && text_of(e, "name") == "process_name")
      out.push_back(text_of(field(e, "args").struct_value(), "name"));
  return out;
}

// What a viewer needs of a Chrome trace: complete events on a thread that
// nest or follow one another, never overlap in part; async begins and ends
// in pairs; every event on a named process. Returns the names of the
// complete events.
inline std::multiset<std::string>
check_trace_viewable(const std::vector<google::protobuf::Struct>& es) {
  // Times in ns, as a viewer reads them (the format's µs to 3 places).
  auto ns = [](double us) { return int64_t(std::llround(us * 1000)); };
  std::map<std::pair<int, int>, std::vector<std::pair<int64_t, int64_t>>> spans;
  std::map<std::string, int> open;
  std::set<int> named, used;
  std::multiset<std::string> complete;
  for (auto& e : es) {
    auto ph = text_of(e, "ph");
    auto pid = int(number_of(e, "pid"));
    REQUIRE(pid >= 1);
    if (ph == "M") {
      if (text_of(e, "name") == "process_name")
        named.insert(pid);
      continue;
    }
    used.insert(pid);
    CHECK(number_of(e, "ts") >= 0);
    if (ph == "X") {
      CHECK(number_of(e, "dur") >= 0);
      auto begin = ns(number_of(e, "ts"));
      spans[{pid, int(number_of(e, "tid"))}].emplace_back(
          begin, begin + ns(number_of(e, "dur")));
      complete.insert(text_of(e, "name"));
    } else if (ph == "b") {
      ++open[text_of(e, "id")];
    } else if (ph == "e") {
      --open[text_of(e, "id")];
    } else {
      CHECK((ph == "i" || ph == "C"));
    }
  }
  for (auto& [id, n] : open) {
    INFO("async slice " << id);
    CHECK(n == 0);
  }
  for (auto pid : used) {
    INFO("process " << pid);
    CHECK(named.count(pid) == 1);
  }
  for (auto& [track, xs] : spans) {
    // Outer slices first where two begin together.
    std::sort(xs.begin(), xs.end(), [](auto& a, auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<int64_t> ends;
    for (auto& [begin, end] : xs) {
      while (!ends.empty() && ends.back() <= begin)
        ends.pop_back();
      INFO("thread " << track.first << "/" << track.second << " at " << begin);
      if (!ends.empty())
        CHECK(end <= ends.back());
      ends.push_back(end);
    }
  }
  return complete;
}

} // namespace cohort::test
