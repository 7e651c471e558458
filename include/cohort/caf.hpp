// Cohort's typed actor interface, for programs that already use CAF: the
// runtime started inside the caller's actor system (cohort::actors::runtime),
// its entry actor and client sinks, work items and results with their CAF
// type registrations (cohort::system_config), errors (cohort::errc,
// cohort::describe). `pkg-config cohort-caf` (or CMake's cohort::caf) adds
// the folder these headers live in, CAF and protobuf. Unlike
// <cohort/cohort.hpp> this interface follows the library's exact version:
// rebuild against each release. docs/embedding.md, "The internal interface
// (CAF)".
#pragma once

#include "actors/runtime.hpp"
#include "messages/errc.hpp"
#include "messages/system_config.hpp"
