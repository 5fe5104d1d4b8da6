// Bad image files: each throws cellm::Error with one line naming the file, never crashes, never reads out of
// bounds (the suite also runs under ASan/UBSan in CI).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "error.h"
#include "vision/image.h"

namespace cellm::vision {
namespace {

const std::filesystem::path kData = CELLM_VISION_DATA;

std::vector<std::uint8_t> read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The message of the cellm::Error that decoding `bytes` throws; fails the test when it throws nothing.
std::string decode_error(const std::vector<std::uint8_t>& bytes, std::uint64_t max_pixels = kMaxImagePixels) {
    try {
        decode_image(bytes, "test.img", max_pixels);
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "no error";
    return {};
}

void expect_one_line_naming(const std::string& message, const std::string& name, const std::string& part) {
    EXPECT_NE(message.find(name), std::string::npos) << message;
    EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

std::uint32_t crc32(const std::uint8_t* data, std::size_t size) {
    std::uint32_t crc = 0xFFFFFFFFu;
    for (std::size_t i = 0; i < size; ++i) {
        crc ^= data[i];
        for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

void put_u32_be(std::vector<std::uint8_t>& bytes, std::size_t at, std::uint32_t value) {
    for (int i = 0; i < 4; ++i) bytes[at + std::size_t(i)] = std::uint8_t(value >> (24 - 8 * i));
}

TEST(ImageErrors, MissingFile) {
    try {
        load_image(kData / "no-such-file.png");
        FAIL() << "no error";
    } catch (const Error& e) {
        expect_one_line_naming(e.what(), "no-such-file.png", "cannot open");
    }
}

TEST(ImageErrors, EmptyAndUnknownFormats) {
    expect_one_line_naming(decode_error({}), "test.img", "not a PNG or JPEG");
    const std::string gif = "GIF89a\x01\x00\x01\x00";
    expect_one_line_naming(decode_error({gif.begin(), gif.end()}), "test.img", "not a PNG or JPEG");
    expect_one_line_naming(decode_error({0x89, 'P', 'N', 'G'}), "test.img", "not a PNG or JPEG");
}

// Every prefix of a file either decodes to the full-size image (a PNG needs nothing after its last image
// data) or throws cellm::Error: libpng's and libjpeg's longjmp errors never escape as crashes.
void check_every_prefix(const std::string& file, int width, int height) {
    const std::vector<std::uint8_t> bytes = read_file(kData / file);
    ASSERT_GT(bytes.size(), 100u);
    std::size_t decoded = 0;
    for (std::size_t size = 0; size < bytes.size(); ++size) {
        const std::vector<std::uint8_t> prefix(bytes.begin(), bytes.begin() + std::ptrdiff_t(size));
        try {
            const Image image = decode_image(prefix, file);
            EXPECT_EQ(image.width, width);
            EXPECT_EQ(image.height, height);
            ++decoded;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(file), std::string::npos);
        }
    }
    EXPECT_LT(decoded, 20u) << "truncated files should fail";
}

TEST(ImageErrors, TruncatedPngAtEveryByte) { check_every_prefix("rgb_37x23.png", 37, 23); }
TEST(ImageErrors, TruncatedJpegAtEveryByte) { check_every_prefix("gray_40x30.jpg", 40, 30); }

TEST(ImageErrors, TruncatedNamesTheCause) {
    std::vector<std::uint8_t> png = read_file(kData / "rgb_37x23.png");
    png.resize(png.size() / 2);
    expect_one_line_naming(decode_error(png), "test.img", "truncated PNG data");
    std::vector<std::uint8_t> jpeg = read_file(kData / "photo_120x90.jpg");
    jpeg.resize(jpeg.size() / 2);
    expect_one_line_naming(decode_error(jpeg), "test.img", "bad JPEG");
}

TEST(ImageErrors, CorruptPng) {
    std::vector<std::uint8_t> png = read_file(kData / "rgb_37x23.png");
    png[20] ^= 0x40;  // inside IHDR: its CRC no longer matches
    expect_one_line_naming(decode_error(png), "test.img", "bad PNG");
    png = read_file(kData / "rgb_37x23.png");
    for (std::size_t i = 60; i < 80; ++i) png[i] ^= 0xA5;  // inside the image data
    expect_one_line_naming(decode_error(png), "test.img", "bad PNG");
}

TEST(ImageErrors, CorruptJpeg) {
    std::vector<std::uint8_t> jpeg = read_file(kData / "photo_120x90.jpg");
    for (std::size_t i = 3; i < 40; ++i) jpeg[i] = 0x00;  // the markers after SOI are gone
    expect_one_line_naming(decode_error(jpeg), "test.img", "bad JPEG");
}

TEST(ImageErrors, AbsurdPngDimensions) {
    std::vector<std::uint8_t> png = read_file(kData / "rgb_37x23.png");
    put_u32_be(png, 16, 60000);  // IHDR width and height, then the chunk's CRC made right again
    put_u32_be(png, 20, 60000);
    put_u32_be(png, 29, crc32(&png[12], 17));
    expect_one_line_naming(decode_error(png), "test.img", "60000x60000 is over the limit");
}

TEST(ImageErrors, AbsurdJpegDimensions) {
    std::vector<std::uint8_t> jpeg = read_file(kData / "photo_120x90.jpg");
    std::size_t sof = 2;
    while (sof + 9 < jpeg.size() && !(jpeg[sof] == 0xFF && jpeg[sof + 1] == 0xC0)) ++sof;
    ASSERT_LT(sof + 9, jpeg.size());
    for (std::size_t at : {sof + 5, sof + 7}) {  // height, then width, big-endian
        jpeg[at] = 0xEA;
        jpeg[at + 1] = 0x60;
    }
    expect_one_line_naming(decode_error(jpeg), "test.img", "60000x60000 is over the limit");
}

TEST(ImageErrors, PixelLimitIsTheCallers) {
    const std::vector<std::uint8_t> png = read_file(kData / "rgb_37x23.png");
    expect_one_line_naming(decode_error(png, 37 * 23 - 1), "test.img", "over the limit of 850 pixels");
    EXPECT_EQ(decode_image(png, "test.img", 37 * 23).width, 37);
    const std::vector<std::uint8_t> jpeg = read_file(kData / "gray_40x30.jpg");
    expect_one_line_naming(decode_error(jpeg, 1000), "test.img", "over the limit of 1000 pixels");
}

TEST(ImageErrors, DirectoryIsNotAnImage) {
    EXPECT_THROW(load_image(kData), Error);
}

}  // namespace
}  // namespace cellm::vision
