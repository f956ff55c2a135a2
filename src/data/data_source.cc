// ht::data::DataSource defaults: what a source that does not give something says.
#include "ht/data/data_source.h"

namespace ht::data {

MicroBatch DataSource::samples(std::int64_t first, std::int64_t count) {
  HT_CHECK(false, ErrorKind::kNotSupported,
           "this data source gives no training samples by index (asked for samples [{}, {})): override "
           "DataSource::samples, or, for a stream, return false from random_access() and override next()",
           first, first + count);
  return {};
}

MicroBatch DataSource::validation_samples(std::int64_t first, std::int64_t count) {
  HT_CHECK(false, ErrorKind::kNotSupported,
           "this data source has no validation data (asked for validation samples [{}, {})); turn validation off "
           "(--eval-samples 0) or give the source a validation split",
           first, first + count);
  return {};
}

MicroBatch DataSource::next() {
  HT_CHECK(false, ErrorKind::kNotSupported,
           "this data source says it is a stream (random_access() is false) but gives no next(): override "
           "DataSource::next, or return true from random_access() and give samples by index");
  return {};
}

}  // namespace ht::data
