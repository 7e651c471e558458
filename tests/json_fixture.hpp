// Reading JSON in tests the way a viewer does: any JSON object parses into a
// protobuf Struct.
#pragma once

#include <catch2/catch.hpp>

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

} // namespace cohort::test
