// The shared jsonschemabench cases (../shared/data/jsonschemabench, read at run time, never copied into the
// repository): each file's schema and its valid and invalid instances, the instances spelled as the JSON Schema
// grammar wants them (compact, each object's properties in the schema's order). Used by the grammar tests and the
// mask benchmark alike.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace cellm::grammar::test {

using Json = nlohmann::ordered_json;

struct SchemaCase {
    std::string name;    // file name
    std::string subset;  // Github_easy, Glaiveai2K, BFCL, ... (the name before "---" or its last '_')
    Json schema;
    struct Instance {
        bool valid;
        std::string text;  // as the grammar spells it
        std::string description;
    };
    std::vector<Instance> instances;
};

// Every case under `dir`, sorted by file name; `every` > 1 keeps one file in that many (a quicker subset).
std::vector<SchemaCase> load_schema_cases(const std::filesystem::path& dir, size_t every = 1);

// `instance` as compact JSON, each object's properties in the order the schemas that apply to it declare.
std::string serialize_instance(const Json& instance, const Json& schema);

}  // namespace cellm::grammar::test
