// JSON text for the files and answers Cohort writes by hand (traces, the
// kernel bundle listings).
#pragma once

#include <string>
#include <string_view>

namespace cohort {

/// `s` as a JSON string (quoted, escaped); bytes that are not UTF-8 become
/// U+FFFD, so that the text is always valid JSON.
std::string json_string(std::string_view s);

} // namespace cohort
