package target

import "fmt"

// Limits bound one API call: entries per call, bytes per entry and bytes
// per call, each counted the way the service counts them (Sender.Size).
type Limits struct {
	Entries    int
	EntryBytes int
	CallBytes  int
}

const (
	kib = 1024
	mib = 1024 * kib
)

// DefaultLimits are the limits every target of the kind accepts with its
// default settings, so a Sender never has a call refused for its shape:
//
//   - EventBridge PutEvents: 10 entries, 256 KiB per call, the entry size
//     by AWS's formula (Source + DetailType + Detail in UTF-8 bytes; Time,
//     which is never set here, would add 14). Buses now take up to 1 MiB,
//     but not in every partition yet; raise the limits to use it.
//   - SNS PublishBatch: 10 entries, 256 KiB per message and per call (the
//     topic's default MaximumMessageSize, which can be raised to 1 MiB).
//   - SQS SendMessageBatch: 10 entries, 1 MiB per message and per call (the
//     current API reference; a queue whose MaximumMessageSize is lower needs
//     EntryBytes lowered to it).
//   - Kinesis PutRecords: 500 records, 1 MiB per record and 5 MiB per call,
//     partition key included (the stream's default; streams configured for
//     larger records take up to 10 MiB).
func DefaultLimits(k Kind) Limits { return limitsOf[k].def }

// MaxLimits are the most the service takes of a call when the target is
// configured for it (a topic's MaximumMessageSize, a stream's maximum
// record size): the ceiling Config.Limits may be raised to.
func MaxLimits(k Kind) Limits { return limitsOf[k].max }

// limitsOf holds each kind's DefaultLimits and MaxLimits side by side; an
// unknown kind has the zero Limits.
var limitsOf = map[Kind]struct{ def, max Limits }{
	EventBridge: {def: Limits{Entries: 10, EntryBytes: 256 * kib, CallBytes: 256 * kib}, max: Limits{Entries: 10, EntryBytes: 1 * mib, CallBytes: 1 * mib}},
	SNS:         {def: Limits{Entries: 10, EntryBytes: 256 * kib, CallBytes: 256 * kib}, max: Limits{Entries: 10, EntryBytes: 1 * mib, CallBytes: 1 * mib}},
	SQS:         {def: Limits{Entries: 10, EntryBytes: 1 * mib, CallBytes: 1 * mib}, max: Limits{Entries: 10, EntryBytes: 1 * mib, CallBytes: 1 * mib}},
	Kinesis:     {def: Limits{Entries: 500, EntryBytes: 1 * mib, CallBytes: 5 * mib}, max: Limits{Entries: 500, EntryBytes: 10 * mib, CallBytes: 10 * mib}},
}

// withDefaults fills the zero fields of l from the kind's defaults and
// checks the result against the kind's ceiling. A field left zero follows
// the one given (a lowered CallBytes lowers EntryBytes, a raised EntryBytes
// raises CallBytes), since an entry must fit in a call or a message of
// EntryBytes could never be sent.
func (l Limits) withDefaults(k Kind) (Limits, error) {
	d, ceil := DefaultLimits(k), MaxLimits(k)
	if l.Entries == 0 {
		l.Entries = d.Entries
	}
	if l.EntryBytes == 0 {
		l.EntryBytes = d.EntryBytes
		if l.CallBytes > 0 {
			l.EntryBytes = min(d.EntryBytes, l.CallBytes)
		}
	}
	if l.CallBytes == 0 {
		l.CallBytes = max(d.CallBytes, l.EntryBytes)
	}
	switch {
	case l.Entries < 1 || l.Entries > ceil.Entries:
		return l, fmt.Errorf("target: Limits.Entries %d: a %s call takes 1 to %d", l.Entries, k, ceil.Entries)
	case l.EntryBytes < 1 || l.EntryBytes > ceil.EntryBytes:
		return l, fmt.Errorf("target: Limits.EntryBytes %d: a %s entry takes 1 to %d bytes", l.EntryBytes, k, ceil.EntryBytes)
	case l.CallBytes < l.EntryBytes || l.CallBytes > ceil.CallBytes:
		return l, fmt.Errorf("target: Limits.CallBytes %d: a %s call takes %d (EntryBytes) to %d bytes", l.CallBytes, k, l.EntryBytes, ceil.CallBytes)
	}
	return l, nil
}
