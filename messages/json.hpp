// JSON text for the files and answers Cohort writes by hand (traces, the
// kernel bundle listings).
#pragma once

#include <string>
#include <string_view>

namespace cohort {

/// `s` as a JSON string (quoted, escaped); bytes that are not UTF-8 become
/// U+FFFD, so that the text is always valid JSON.
std::string json_string(std::string_view s);

/// The length of the UTF-8 sequence at `s[i]`, 0 when it is not one
/// (overlong forms and surrogates are not).
size_t utf8_length(std::string_view s, size_t i);

} // namespace cohort
