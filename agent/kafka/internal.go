package kafka

// internalTopics are the topics Kafka itself creates and owns. The one
// list sluice keeps, from Apache Kafka's sources:
//   - __consumer_offsets, __transaction_state, __share_group_state:
//     org.apache.kafka.common.internals.Topic (GROUP_METADATA_TOPIC_NAME,
//     TRANSACTION_STATE_TOPIC_NAME, SHARE_GROUP_STATE_TOPIC_NAME, KIP-932);
//   - __cluster_metadata: the KRaft metadata log (KIP-500, KIP-595);
//   - __remote_log_metadata: tiered storage's topic-based metadata manager
//     (KIP-405, TopicBasedRemoteLogMetadataManagerConfig).
//
// A user topic that merely starts with "__" (say "__mine") is not internal.
var internalTopics = map[string]bool{
	"__consumer_offsets":    true,
	"__transaction_state":   true,
	"__share_group_state":   true,
	"__cluster_metadata":    true,
	"__remote_log_metadata": true,
}

// IsInternalTopic reports one of Kafka's own internal topics.
func IsInternalTopic(name string) bool { return internalTopics[name] }
