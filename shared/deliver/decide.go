package deliver

// pushResult is what one push comes to.
type pushResult int

const (
	// pushFailed: not accepted (a transient error, a refusal, a timeout,
	// any answer but 2xx and 410). The row stays delivered, and the sweep
	// redelivers it after SWEEP_STUCK_AFTER, or dead-letters it.
	pushFailed pushResult = iota
	// pushAcked: the target accepted it; the row is acked.
	pushAcked
	// pushGone: the webhook answered 410 Gone: it will never take this
	// delivery, and the row is dead with reason gone.
	pushGone
)

// webhookResult is a webhook's answer as a push result: 2xx acks, 410
// makes the delivery dead, anything else (3xx included: no redirect is
// followed) leaves it to the sweep.
func webhookResult(status int) pushResult {
	switch {
	case status >= 200 && status < 300:
		return pushAcked
	case status == 410:
		return pushGone
	}
	return pushFailed
}

// The reasons a delivery dies here (deliveries.dead_reason), each with its
// DeadByReason metric: DeadUnknownRecipient, DeadRecipientDisabled,
// DeadGone.
const (
	ReasonUnknownRecipient  = "unknown_recipient"
	ReasonRecipientDisabled = "recipient_disabled"
	ReasonGone              = "gone"
)

// split sorts a batch's outcomes into the ids to ack and to make dead.
func split(outs []outcome) (acked, gone []int64) {
	acked, gone = []int64{}, []int64{}
	for _, o := range outs {
		switch o.result {
		case pushAcked:
			acked = append(acked, o.id)
		case pushGone:
			gone = append(gone, o.id)
		}
	}
	return acked, gone
}
