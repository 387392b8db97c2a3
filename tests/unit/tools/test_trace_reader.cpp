// gpumem-replay's trace reader: both time formats, columns by name, CRLF and blanks, hex and
// decimal values, and every kind of malformed input reported with its line number and column.
#include <catch2/catch.hpp>

#include <string>

#include "base/trace_format.h"
#include "trace_reader.h"

using namespace gpumem::replay;

namespace {

Trace must_parse(std::string_view text) {
  TraceParseResult result = parse_trace(text);
  INFO("error: " << result.error);
  REQUIRE(result.trace);
  CHECK(result.error.empty());
  return *result.trace;
}

std::string must_fail(std::string_view text) {
  const TraceParseResult result = parse_trace(text);
  REQUIRE_FALSE(result.trace);
  REQUIRE_FALSE(result.error.empty());
  return result.error;
}

constexpr std::string_view kGpumemHeader = "Thread,Time,Action,Pointer,Size,Stream,Device,Reserved,Limit\n";
constexpr std::string_view kRmmHeader = "Thread,Time,Action,Pointer,Size,Stream\n";

}  // namespace

TEST_CASE("gpumem's trace: epoch times, every column", "[trace_reader]") {
  const Trace trace = must_parse(std::string(kGpumemHeader) +
                                 "4242,1764047045.123456,allocate,0x7f0000000000,1000,0x0,1,2097152,8388608\n"
                                 "4242,1764047045.5,free,0x7f0000000000,1000,0x0,1,2097152,\n");
  REQUIRE(trace.records.size() == 2);
  CHECK(trace.has_device_column);
  CHECK(trace.has_reserved_column);
  CHECK(trace.has_limit_column);
  const TraceRecord& first = trace.records[0];
  CHECK(first.line == 2);
  CHECK(first.thread == 4242);
  CHECK(first.time == Approx(1764047045.123456).epsilon(1e-15));
  CHECK(first.action == TraceAction::allocate);
  CHECK(first.pointer == 0x7f0000000000u);
  CHECK(first.size == 1000);
  CHECK(first.stream == 0);
  CHECK(first.device == 1);
  CHECK(first.reserved == std::size_t{2097152});
  CHECK(first.limit == std::size_t{8388608});
  const TraceRecord& second = trace.records[1];
  CHECK(second.line == 3);
  CHECK(second.action == TraceAction::free);
  CHECK(second.time == 1764047045.5);
  CHECK(second.reserved == std::size_t{2097152});
  CHECK_FALSE(second.limit);  // empty field
}

TEST_CASE("gpumem's trace with its Mode column, and the writer's header", "[trace_reader]") {
  // The writer's header is the nine columns read before, then Mode, filled on a device's first row.
  CHECK(gpumem::trace_format::kHeader == std::string(kGpumemHeader.substr(0, kGpumemHeader.size() - 1)) + ",Mode\n");
  const Trace trace = must_parse(std::string(gpumem::trace_format::kHeader) +
                                 "7,1764047045.1,allocate,0x7f0000000000,512,0,0,8388608,1073741824,bfc growth\n"
                                 "7,1764047045.2,free,0x7f0000000000,512,0,0,8388608,1073741824,\n");
  REQUIRE(trace.records.size() == 2);
  CHECK(trace.records[0].reserved == std::size_t{8388608});
  CHECK(trace.records[1].limit == std::size_t{1073741824});
  // A row without the Mode field is one field short of the header: named as such.
  CHECK_THAT(must_fail(std::string(gpumem::trace_format::kHeader) +
                       "7,1764047045.1,allocate,0x7f0000000000,512,0,0,8388608,1073741824\n"),
             Catch::Contains("column Mode: missing"));
}

TEST_CASE("RMM's trace: time of day, no optional columns", "[trace_reader]") {
  const Trace trace = must_parse(std::string(kRmmHeader) +
                                 "140213,12:34:56.789012,allocate,0x7f1200000000,256,0x0\n"
                                 "140213,00:00:01,deallocate,7f1200000000,256,0\n"
                                 "140213,23:59:59.999999,allocate failure,0x0,1099511627776,0x5\n");
  REQUIRE(trace.records.size() == 3);
  CHECK_FALSE(trace.has_device_column);
  CHECK_FALSE(trace.has_reserved_column);
  CHECK_FALSE(trace.has_limit_column);
  CHECK(trace.records[0].time == Approx(12 * 3600 + 34 * 60 + 56.789012).epsilon(1e-12));
  CHECK(trace.records[0].device == 0);
  CHECK_FALSE(trace.records[0].reserved);
  CHECK_FALSE(trace.records[0].limit);
  CHECK(trace.records[1].time == 1.0);
  CHECK(trace.records[1].action == TraceAction::free);
  CHECK(trace.records[1].pointer == 0x7f1200000000u);
  CHECK(trace.records[2].action == TraceAction::allocate_failure);
  CHECK(trace.records[2].pointer == 0);
  CHECK(trace.records[2].size == (std::size_t{1} << 40));
  CHECK(trace.records[2].stream == 5);
}

TEST_CASE("columns are found by name, in any order, unknown ones ignored", "[trace_reader]") {
  const Trace trace = must_parse(
      " size , Extra,STREAM,Pointer,Device,Action,Comment,Time,Thread\n"
      "512,whatever,17,0xABCdef00,3,Allocate,,1.25,9\n");
  REQUIRE(trace.records.size() == 1);
  const TraceRecord& row = trace.records[0];
  CHECK(row.size == 512);
  CHECK(row.stream == 17);
  CHECK(row.pointer == 0xabcdef00u);
  CHECK(row.device == 3);
  CHECK(row.action == TraceAction::allocate);
  CHECK(row.time == 1.25);
  CHECK(row.thread == 9);
  CHECK(trace.has_device_column);
  CHECK_FALSE(trace.has_limit_column);
}

TEST_CASE("CRLF, surrounding blanks and blank lines are tolerated", "[trace_reader]") {
  const Trace trace = must_parse(
      "Thread , Time , Action , Pointer , Size , Stream\r\n"
      " 1 , 10.5 , allocate , 0x100 , 256 , 0x10 \r\n"
      "\r\n"
      "1,\t11.0\t,free,100,256,16\r\n"
      "\r\n"
      "   \n"
      "\n");
  REQUIRE(trace.records.size() == 2);
  CHECK(trace.records[0].line == 2);
  CHECK(trace.records[0].pointer == 0x100);
  CHECK(trace.records[0].stream == 16);
  CHECK(trace.records[1].line == 4);
  CHECK(trace.records[1].pointer == 0x100);  // hex without 0x
  CHECK(trace.records[1].stream == 16);      // decimal
  CHECK(trace.records[1].time == 11.0);
}

TEST_CASE("a header alone is an empty trace", "[trace_reader]") {
  CHECK(must_parse(kRmmHeader).records.empty());
}

TEST_CASE("a last row cut short (no newline) is skipped and counted, even where it reads", "[trace_reader]") {
  const std::string rows = std::string(kRmmHeader) + "1,2,allocate,0x100,4096,0\n" + "1,3,free,0x100,4096,0\n";
  // The last two read as rows: a size of 4096 cut to 40, a stream of 0 cut before its end.
  for (const std::string_view torn : {"1,4,alloc", "1,4,allocate,0x2", "1", "1,4,allocate,0x200,4096,",
                                      "1,4,allocate,0x200,40", "1,4,allocate,0x200,4096,0"}) {
    const Trace trace = must_parse(rows + std::string(torn));
    CHECK(trace.records.size() == 2);
    CHECK(trace.torn_rows == 1);
    CHECK(trace.torn_line == 4);
  }
  CHECK(must_parse(rows).torn_rows == 0);
  // A header cut short: nothing was traced.
  CHECK(must_fail("Thread,Time,Act").find("got an empty trace") != std::string::npos);
  // An unreadable row that ends its line is no torn row, nor one followed by more lines.
  CHECK(must_fail(rows + "1,4,alloc\n").rfind("line 4: ", 0) == 0);
  CHECK_FALSE(must_fail(rows + "1,4,alloc\n1,5,free,0x100,4096,0").empty());
}

TEST_CASE("hex and decimal values at their limits", "[trace_reader]") {
  const Trace trace = must_parse(std::string(kRmmHeader) +
                                 "18446744073709551615,0,allocate,0xffffffffffffffff,18446744073709551615,"
                                 "0xFFFFFFFFFFFFFFFF\n");
  REQUIRE(trace.records.size() == 1);
  CHECK(trace.records[0].thread == 18446744073709551615u);
  CHECK(trace.records[0].pointer == ~std::uintptr_t{0});
  CHECK(trace.records[0].size == ~std::size_t{0});
  CHECK(trace.records[0].stream == ~std::uintptr_t{0});
}

TEST_CASE("a malformed header is reported on its line", "[trace_reader]") {
  CHECK(must_fail("") == "line 1: expected a header line naming the columns Thread,Time,Action,Pointer,Size,Stream, "
                         "got an empty trace");
  CHECK(must_fail("\n\n").find("line 3: expected a header line") == 0);
  const std::string missing = must_fail("\nThread,Time,Action,Pointer,Stream\n1,2,free,0x1,0\n");
  CHECK(missing.find("line 2: the header lacks column Size") == 0);
  const std::string twice = must_fail("Thread,Time,Action,Pointer,Size,Stream,size\n");
  CHECK(twice == "line 1: the header names column Size twice");
  // A first line of data is no header.
  CHECK(must_fail("1,2,allocate,0x1,256,0\n").find("line 1: the header lacks column Thread") == 0);
}

TEST_CASE("each malformed field is reported with its line and column", "[trace_reader]") {
  struct Case {
    std::string row;
    std::string error;
  };
  const std::string header(kGpumemHeader);
  const std::string good = "1,10.5,allocate,0x100,256,0,0,0,0\n";
  const Case cases[] = {
      {"x,10.5,allocate,0x100,256,0,0,0,0", "column Thread: expected a decimal thread id, got \"x\""},
      {"-1,10.5,allocate,0x100,256,0,0,0,0", "column Thread: expected a decimal thread id, got \"-1\""},
      {"1,,allocate,0x100,256,0,0,0,0", "column Time: expected"},
      {"1,yesterday,allocate,0x100,256,0,0,0,0", "column Time: expected"},
      {"1,-5.0,allocate,0x100,256,0,0,0,0", "column Time: expected"},
      {"1,1e9,allocate,0x100,256,0,0,0,0", "column Time: expected"},
      {"1,24:00:00.0,allocate,0x100,256,0,0,0,0", "column Time: expected"},
      {"1,12:60:00,allocate,0x100,256,0,0,0,0", "column Time: expected"},
      {"1,12:3:00,allocate,0x100,256,0,0,0,0", "column Time: expected"},
      {"1,12:30,allocate,0x100,256,0,0,0,0", "column Time: expected"},
      {"1,12:30:5.5,allocate,0x100,256,0,0,0,0", "column Time: expected"},
      {"1,10.5,alloc,0x100,256,0,0,0,0",
       "column Action: expected allocate, free, deallocate or \"allocate failure\", got \"alloc\""},
      {"1,10.5,allocate,0xZZ,256,0,0,0,0", "column Pointer: expected a hex address"},
      {"1,10.5,allocate,0x,256,0,0,0,0", "column Pointer: expected a hex address"},
      {"1,10.5,allocate,,256,0,0,0,0", "column Pointer: expected a hex address"},
      {"1,10.5,allocate,0x10000000000000000,256,0,0,0,0", "column Pointer: expected a hex address"},
      {"1,10.5,allocate,0x100,-256,0,0,0,0", "column Size: expected a decimal byte count, got \"-256\""},
      {"1,10.5,allocate,0x100,1.5,0,0,0,0", "column Size: expected a decimal byte count, got \"1.5\""},
      {"1,10.5,allocate,0x100,0x100,0,0,0,0", "column Size: expected a decimal byte count, got \"0x100\""},
      {"1,10.5,allocate,0x100,18446744073709551616,0,0,0,0", "column Size: expected a decimal byte count"},
      {"1,10.5,allocate,0x100,,0,0,0,0", "column Size: expected a decimal byte count, got \"\""},
      {"1,10.5,allocate,0x100,256,str,0,0,0", "column Stream: expected a stream handle in decimal or 0x-hex"},
      {"1,10.5,allocate,0x100,256,ff,0,0,0", "column Stream: expected a stream handle in decimal or 0x-hex"},
      {"1,10.5,allocate,0x100,256,0,gpu0,0,0", "column Device: expected a decimal device ordinal, got \"gpu0\""},
      {"1,10.5,allocate,0x100,256,0,4294967296,0,0", "column Device: expected a decimal device ordinal"},
      {"1,10.5,allocate,0x100,256,0,0,lots,0", "column Reserved: expected a decimal byte count or nothing"},
      {"1,10.5,allocate,0x100,256,0,0,0,1GiB", "column Limit: expected a decimal byte count or nothing"},
      {"1,10.5,allocate,0x100,256,0,0,0", "column Limit: missing (expected 9 comma-separated fields as in the "
                                          "header, got 8)"},
      {"1,10.5,allocate,0x100", "column Size: missing (expected 9 comma-separated fields as in the header, got 4)"},
      {"1,10.5,allocate,0x100,256,0,0,0,0,extra", "expected 9 comma-separated fields as in the header, got 10"},
  };
  for (const Case& c : cases) {
    // The bad row comes after a good one and a blank line: it is on line 4.
    const std::string error = must_fail(header + good + "\r\n" + c.row + "\r\n" + good);
    INFO("row: " << c.row);
    INFO("error: " << error);
    CHECK(error.rfind("line 4: ", 0) == 0);
    CHECK(error.find(c.error) != std::string::npos);
  }
}

TEST_CASE("a row short of an unknown column is reported without a column name", "[trace_reader]") {
  const std::string error = must_fail("Thread,Time,Action,Pointer,Size,Stream,Note\n1,2,free,0x1,0,0\n");
  CHECK(error == "line 2: expected 7 comma-separated fields as in the header, got 6");
}

TEST_CASE("an empty pointer is accepted on a refused request only", "[trace_reader]") {
  const Trace trace = must_parse(std::string(kRmmHeader) + "1,2,allocate failure,,4096,0\n");
  REQUIRE(trace.records.size() == 1);
  CHECK(trace.records[0].pointer == 0);
  CHECK(must_fail(std::string(kRmmHeader) + "1,2,free,,4096,0\n").rfind("line 2: column Pointer:", 0) == 0);
}

TEST_CASE("a bad value in the error is quoted and cut short", "[trace_reader]") {
  const std::string error = must_fail(std::string(kRmmHeader) + "1,2,allocate,0x1,\x01" + std::string(100, '9') +
                                      ",0\n");
  CHECK(error.find("got \"\\x0199") != std::string::npos);
  CHECK(error.find("...\"") != std::string::npos);
  CHECK(error.size() < 200);
}

TEST_CASE("action names are matched in any letter case", "[trace_reader]") {
  const Trace trace = must_parse(std::string(kRmmHeader) +
                                 "1,2,ALLOCATE,0x1,256,0\n1,2,Free,0x1,256,0\n1,2,Allocate Failure,0x0,256,0\n");
  REQUIRE(trace.records.size() == 3);
  CHECK(trace.records[0].action == TraceAction::allocate);
  CHECK(trace.records[1].action == TraceAction::free);
  CHECK(trace.records[2].action == TraceAction::allocate_failure);
  CHECK(to_string(TraceAction::allocate_failure) == "allocate failure");
}
