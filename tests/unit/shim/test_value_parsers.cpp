// Parsing of single variable values: byte sizes, booleans, fractions, and the quoting used in errors.
#include <catch2/catch.hpp>

#include <cstddef>
#include <limits>
#include <string>

#include "policy/policy.h"
#include "policy/value_parsers.h"

using gpumem::parse_byte_size;

namespace {
constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = KiB << 10;
constexpr std::size_t GiB = MiB << 10;
constexpr std::size_t TiB = GiB << 10;
constexpr std::size_t PiB = TiB << 10;
constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
}  // namespace

TEST_CASE("byte sizes: plain integers", "[policy][bytes]") {
  CHECK(parse_byte_size("0") == std::size_t{0});
  CHECK(parse_byte_size("1") == std::size_t{1});
  CHECK(parse_byte_size("1048576") == std::size_t{1048576});
  CHECK(parse_byte_size("000123") == std::size_t{123});
  CHECK(parse_byte_size("18446744073709551615") == kMax);
}

TEST_CASE("byte sizes: binary and decimal units in any case", "[policy][bytes]") {
  CHECK(parse_byte_size("10GiB") == 10 * GiB);
  CHECK(parse_byte_size("10gib") == 10 * GiB);
  CHECK(parse_byte_size("10Gi") == 10 * GiB);
  CHECK(parse_byte_size("10G") == 10 * GiB);
  CHECK(parse_byte_size("10g") == 10 * GiB);
  CHECK(parse_byte_size("10GB") == std::size_t{10'000'000'000});
  CHECK(parse_byte_size("512MB") == std::size_t{512'000'000});
  CHECK(parse_byte_size("512MiB") == 512 * MiB);
  CHECK(parse_byte_size("512M") == 512 * MiB);
  CHECK(parse_byte_size("4K") == 4 * KiB);
  CHECK(parse_byte_size("4kb") == std::size_t{4000});
  CHECK(parse_byte_size("4KiB") == 4 * KiB);
  CHECK(parse_byte_size("2T") == 2 * TiB);
  CHECK(parse_byte_size("2TB") == std::size_t{2'000'000'000'000});
  CHECK(parse_byte_size("1PiB") == PiB);
  CHECK(parse_byte_size("1PB") == std::size_t{1'000'000'000'000'000});
  CHECK(parse_byte_size("100B") == std::size_t{100});
  CHECK(parse_byte_size("100b") == std::size_t{100});
  CHECK(parse_byte_size("10 GiB") == 10 * GiB);
  CHECK(parse_byte_size("10\tGiB") == 10 * GiB);
}

TEST_CASE("byte sizes: decimals and exponents", "[policy][bytes]") {
  CHECK(parse_byte_size("1e9") == std::size_t{1'000'000'000});
  CHECK(parse_byte_size("1E9") == std::size_t{1'000'000'000});
  CHECK(parse_byte_size("1e+9") == std::size_t{1'000'000'000});
  CHECK(parse_byte_size("2.5e9") == std::size_t{2'500'000'000});
  CHECK(parse_byte_size("1.5G") == GiB + GiB / 2);
  CHECK(parse_byte_size("1.50000000000000000000000000G") == GiB + GiB / 2);  // trailing zeros are free
  CHECK(parse_byte_size("0.5KiB") == std::size_t{512});
  CHECK(parse_byte_size("0.1K") == std::size_t{102});  // 102.4: the fractional byte is dropped
  CHECK(parse_byte_size("1.9") == std::size_t{1});
  CHECK(parse_byte_size("15e-1") == std::size_t{1});
  CHECK(parse_byte_size("1e-100") == std::size_t{0});
  CHECK(parse_byte_size("0e99999") == std::size_t{0});
  CHECK(parse_byte_size("1.8446744073709551615e19") == kMax);
  CHECK(parse_byte_size("0.25e1GiB") == 2 * GiB + GiB / 2);
}

TEST_CASE("byte sizes: overflow is rejected", "[policy][bytes]") {
  CHECK_FALSE(parse_byte_size("18446744073709551616"));
  CHECK_FALSE(parse_byte_size("99999999999999999999"));
  CHECK_FALSE(parse_byte_size("1e20"));
  CHECK_FALSE(parse_byte_size("1e99999999999999999999"));
  CHECK_FALSE(parse_byte_size("16384PiB"));
  CHECK_FALSE(parse_byte_size("16EB"));  // no exabyte unit: rejected as garbage too
  CHECK_FALSE(parse_byte_size("123456789012345678901"));  // more than 20 significant digits
  CHECK(parse_byte_size("16383PiB") == 16383 * PiB);
}

TEST_CASE("byte sizes: malformed text is rejected", "[policy][bytes]") {
  for (const char* bad : {"", " ", "-1", "-1G", "+1", "G", "GiB", "1.", ".5", "1..5", "1.5.5", "1e", "1e+",
                          "1e-", "e9", "10GiBs", "10 G iB", "10GiB ", " 10GiB", "1,000", "1_000", "0x10",
                          "nan", "inf", "infinity", "1 2", "10XB", "1iB", "10 bytes", "1\n"}) {
    INFO("value: \"" << bad << "\"");
    CHECK_FALSE(parse_byte_size(bad));
  }
}

TEST_CASE("booleans: every accepted spelling, in any case", "[policy][bool]") {
  for (const char* yes : {"1", "true", "True", "TRUE", "yes", "Yes", "on", "ON", "tRuE"}) {
    INFO(yes);
    CHECK(gpumem::parse_boolean(yes) == true);
  }
  for (const char* no : {"0", "false", "False", "FALSE", "no", "NO", "off", "Off"}) {
    INFO(no);
    CHECK(gpumem::parse_boolean(no) == false);
  }
  for (const char* bad : {"", "2", "-1", "00", "y", "n", "t", "f", "enable", "truee", "true ", "01"}) {
    INFO(bad);
    CHECK_FALSE(gpumem::parse_boolean(bad));
  }
}

TEST_CASE("fractions: (0, 1] only", "[policy][fraction]") {
  CHECK(gpumem::parse_fraction("0.75") == 0.75);
  CHECK(gpumem::parse_fraction(".5") == 0.5);
  CHECK(gpumem::parse_fraction("1") == 1.0);
  CHECK(gpumem::parse_fraction("1.0") == 1.0);
  CHECK(gpumem::parse_fraction("5e-1") == 0.5);
  CHECK(gpumem::parse_fraction("0.000001") == 0.000001);
  for (const char* bad : {"", "0", "0.0", "-0", "-0.5", "1.5", "1.0000001", "2", "nan", "NaN", "inf", "-inf",
                          "0.5x", "0.5 ", "0,5", "+0.5", "50%", "1e-400", "1e400", "0x0.8p0", "half"}) {
    INFO(bad);
    CHECK_FALSE(gpumem::parse_fraction(bad));
  }
}

TEST_CASE("blanks around values are dropped", "[policy]") {
  CHECK(gpumem::trim_blanks("  0.5\t\n") == "0.5");
  CHECK(gpumem::trim_blanks(" \t ").empty());
  CHECK(gpumem::trim_blanks("a b") == "a b");
}

TEST_CASE("values in error lines stay on one short line", "[policy]") {
  CHECK(gpumem::quote_value("1.5") == "\"1.5\"");
  CHECK(gpumem::quote_value("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(gpumem::quote_value("x\ny") == "\"x\\x0ay\"");
  CHECK(gpumem::quote_value("\xc3\xa9") == "\"\\xc3\\xa9\"");
  const std::string quoted = gpumem::quote_value(std::string(1000, 'a'));
  CHECK(quoted == "\"" + std::string(64, 'a') + "...\"");
}

TEST_CASE("byte counts are formatted exactly", "[policy]") {
  CHECK(gpumem::format_byte_size(0) == "0B");
  CHECK(gpumem::format_byte_size(1000) == "1000B");
  CHECK(gpumem::format_byte_size(1536 * KiB) == "1536KiB");
  CHECK(gpumem::format_byte_size(10 * GiB) == "10GiB");
  CHECK(gpumem::format_byte_size(3 * PiB) == "3PiB");
  CHECK(gpumem::format_byte_size(2048 * PiB) == "2048PiB");
  CHECK(gpumem::format_byte_size(1'000'000'000) == "1000000000B");
}
