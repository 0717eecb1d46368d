package hotkeyd

import "github.com/twmb/franz-go/pkg/kmsg"

func kmsgMetadata(topic string) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	return req
}
