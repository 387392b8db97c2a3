// Reading the simulator's JSON report (CUDASIM_REPORT) that a test's child process wrote.
#pragma once

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>

namespace driver_test {

// The report at `path`, parsed; the file is removed.
inline nlohmann::json take_report(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  const nlohmann::json report = nlohmann::json::parse(in);
  std::remove(path.c_str());
  return report;
}

}  // namespace driver_test
