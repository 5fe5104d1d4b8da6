// host/server/base64: RFC 4648's test vectors, every byte value, and each way strict decoding refuses text.
#include "base64.h"

#include <gtest/gtest.h>

#include <string>

namespace cellm::server {
namespace {

std::string decoded(std::string_view text) {
    const std::vector<uint8_t> bytes = decode_base64(text);
    EXPECT_EQ(bytes.size(), base64_decoded_size(text)) << text;
    return {bytes.begin(), bytes.end()};
}

// The message decoding `text` fails with.
std::string refusal(std::string_view text) {
    try {
        decode_base64(text);
    } catch (const Base64Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "'" << text << "' decoded";
    return {};
}

TEST(Base64, Rfc4648Vectors) {
    EXPECT_EQ(decoded(""), "");
    EXPECT_EQ(decoded("Zg=="), "f");
    EXPECT_EQ(decoded("Zm8="), "fo");
    EXPECT_EQ(decoded("Zm9v"), "foo");
    EXPECT_EQ(decoded("Zm9vYg=="), "foob");
    EXPECT_EQ(decoded("Zm9vYmE="), "fooba");
    EXPECT_EQ(decoded("Zm9vYmFy"), "foobar");
}

TEST(Base64, EveryByteValue) {
    // Python's base64.b64encode(bytes(range(256))).
    const std::string text =
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0BBQkNERUZHSElKS0xNTk9Q"
        "UVJTVFVWV1hZWltcXV5fYGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn+AgYKDhIWGh4iJiouMjY6PkJGSk5SVlpeYmZqbnJ2en6Ch"
        "oqOkpaanqKmqq6ytrq+wsbKztLW2t7i5uru8vb6/wMHCw8TFxsfIycrLzM3Oz9DR0tPU1dbX2Nna29zd3t/g4eLj5OXm5+jp6uvs7e7v8PHy"
        "8/T19vf4+fr7/P3+/w==";
    const std::vector<uint8_t> bytes = decode_base64(text);
    ASSERT_EQ(bytes.size(), 256u);
    for (size_t i = 0; i < bytes.size(); ++i) EXPECT_EQ(bytes[i], i);
}

TEST(Base64, RefusesWhatIsNotStrictBase64) {
    EXPECT_NE(refusal("Zm9v!mFy").find("invalid character '!' at offset 4"), std::string::npos);
    EXPECT_NE(refusal("Zm9v\nYmFy").find("byte 0x0a at offset 4"), std::string::npos);
    EXPECT_NE(refusal("Zm9v YmFy").find("byte 0x20 at offset 4"), std::string::npos);
    EXPECT_NE(refusal("Zm9-").find("URL-safe"), std::string::npos);
    EXPECT_NE(refusal("Zm9vY").find("not a multiple of 4"), std::string::npos);
    EXPECT_NE(refusal("Zg").find("not a multiple of 4"), std::string::npos);  // unpadded "f"
    EXPECT_NE(refusal("Zg=").find("not a multiple of 4"), std::string::npos);
    EXPECT_NE(refusal("Zg=a").find("'=' at offset 2 is not at the end"), std::string::npos);
    EXPECT_NE(refusal("Z===").find("'=' at offset 1 is not at the end"), std::string::npos);
    EXPECT_NE(refusal("====").find("'=' at offset 0 is not at the end"), std::string::npos);
    EXPECT_NE(refusal("Zg==Zg==").find("'=' at offset 2 is not at the end"), std::string::npos);
    // "f" is Zg==; Zh== has the same byte with a leftover bit set, Zm9= the same two bytes as Zm8=.
    EXPECT_NE(refusal("Zh==").find("bits set"), std::string::npos);
    EXPECT_NE(refusal("Zm9=").find("bits set"), std::string::npos);
}

}  // namespace
}  // namespace cellm::server
