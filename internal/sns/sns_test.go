package sns_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"bucketfs/internal/sns"
	"bucketfs/internal/sns/snstest"
)

// These tests play SNS with snstest's fake (its own key and self-signed
// certificate, served through an injected HTTP client): AWS cannot be
// reached from here.

const topic = "arn:aws:sns:" + snstest.Region + ":123456789012:bucket-events"

func notification() *sns.Message {
	return &sns.Message{Type: sns.TypeNotification, MessageID: "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324", TopicArn: topic,
		Subject: "Amazon S3 Notification", Message: `{"Records":[{"eventName":"ObjectCreated:Put"}]}`,
		Timestamp: "2026-11-30T12:00:00.000Z", UnsubscribeURL: "https://sns." + snstest.Region + ".amazonaws.com/?Action=Unsubscribe"}
}

func confirmation() *sns.Message {
	return &sns.Message{Type: sns.TypeSubscriptionConfirmation, MessageID: "165545c9-2a5c-472c-8df2-7ff2be2b3b1b",
		TopicArn: topic, Token: "2336412f37f", Message: "You have chosen to subscribe to the topic " + topic + ".",
		SubscribeURL: snstest.SubscribeURL(topic), Timestamp: "2026-11-30T12:00:00.000Z"}
}

func TestStringToSignListsTheFieldsOfEachTypeInOrder(t *testing.T) {
	n := notification()
	got, err := sns.StringToSign(n)
	if err != nil {
		t.Fatal(err)
	}
	want := "Message\n" + n.Message + "\nMessageId\n" + n.MessageID + "\nSubject\n" + n.Subject + "\nTimestamp\n" +
		n.Timestamp + "\nTopicArn\n" + topic + "\nType\nNotification\n"
	if got != want {
		t.Errorf("notification:\n%q\nwant\n%q", got, want)
	}
	n.Subject = ""
	if got, _ := sns.StringToSign(n); strings.Contains(got, "Subject") {
		t.Errorf("a notification without a subject signs %q", got)
	}
	c := confirmation()
	got, err = sns.StringToSign(c)
	if err != nil {
		t.Fatal(err)
	}
	want = "Message\n" + c.Message + "\nMessageId\n" + c.MessageID + "\nSubscribeURL\n" + c.SubscribeURL +
		"\nTimestamp\n" + c.Timestamp + "\nToken\n" + c.Token + "\nTopicArn\n" + topic + "\nType\nSubscriptionConfirmation\n"
	if got != want {
		t.Errorf("confirmation:\n%q\nwant\n%q", got, want)
	}
	if _, err := sns.StringToSign(&sns.Message{Type: "Other"}); err == nil {
		t.Error("an unknown type has a string to sign")
	}
}

func TestSignaturesOfBothVersionsVerifyAndAnyChangeBreaksThem(t *testing.T) {
	fake := snstest.New(t)
	v := sns.NewVerifier(fake.Client)
	ctx := context.Background()
	for _, version := range []string{"1", "2"} {
		for name, m := range map[string]*sns.Message{"notification": notification(), "confirmation": confirmation()} {
			fake.Sign(t, m, version)
			if err := v.Verify(ctx, m); err != nil {
				t.Errorf("version %s %s: %v", version, name, err)
			}
			changed := *m
			changed.Message += " "
			if err := v.Verify(ctx, &changed); err == nil {
				t.Errorf("version %s %s with a changed message verified", version, name)
			}
			changed = *m
			changed.SignatureVersion = map[string]string{"1": "2", "2": "1"}[version]
			if err := v.Verify(ctx, &changed); err == nil {
				t.Errorf("version %s %s checked under the other version verified", version, name)
			}
		}
	}
	if n := fake.CertFetches(); n != 1 {
		t.Errorf("the certificate was fetched %d times for 12 checks, want once", n)
	}
}

func TestAMessageSignedWithAnotherKeyDoesNotVerify(t *testing.T) {
	fake, other := snstest.New(t), snstest.New(t)
	m := notification()
	other.Sign(t, m, "2")
	m.SigningCertURL = fake.CertURL // the right certificate, the wrong signer
	if err := sns.NewVerifier(fake.Client).Verify(context.Background(), m); err == nil {
		t.Fatal("a signature by another key verified")
	}
}

func TestCertificatesAndSubscriptionsAreFetchedOnlyFromSNSHostsOverHTTPS(t *testing.T) {
	fake := snstest.New(t)
	v := sns.NewVerifier(fake.Client)
	ctx := context.Background()
	for _, u := range []string{
		"http://sns." + snstest.Region + ".amazonaws.com/SimpleNotificationService-fake.pem",
		"https://sns." + snstest.Region + ".amazonaws.com.evil.example/x.pem",
		"https://evil.example/sns." + snstest.Region + ".amazonaws.com/x.pem",
		"https://s3." + snstest.Region + ".amazonaws.com/x.pem",
		"https://user:pw@sns." + snstest.Region + ".amazonaws.com/x.pem",
		"https://sns." + snstest.Region + ".amazonaws.com:8443/x.pem",
		"https://sns.amazonaws.com/x.pem",
	} {
		m := notification()
		fake.Sign(t, m, "2")
		m.SigningCertURL = u
		if err := v.Verify(ctx, m); err == nil {
			t.Errorf("certificate URL %s accepted", u)
		}
		c := confirmation()
		c.SubscribeURL = u
		if err := v.Confirm(ctx, c); err == nil {
			t.Errorf("subscribe URL %s visited", u)
		}
	}
	if got := fake.Requested(); len(got) != 0 {
		t.Errorf("requests sent for untrusted URLs: %q", got)
	}
	for _, u := range []string{"https://sns.cn-north-1.amazonaws.com.cn/x.pem", "https://sns.us-gov-west-1.amazonaws.com:443/x.pem"} {
		if _, err := sns.TrustedURL(u); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
}

func TestConfirmVisitsTheSubscribeURL(t *testing.T) {
	fake := snstest.New(t)
	c := confirmation()
	if err := sns.NewVerifier(fake.Client).Confirm(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if got := fake.Visited(); len(got) != 1 || got[0] != c.SubscribeURL {
		t.Fatalf("visited %q, want the subscribe URL", got)
	}
}

func TestParseTellsAnEnvelopeFromAnS3Event(t *testing.T) {
	b, _ := json.Marshal(notification())
	if m, ok, err := sns.Parse(b); err != nil || !ok || m.Message != notification().Message {
		t.Errorf("envelope: %+v %v %v", m, ok, err)
	}
	if _, ok, err := sns.Parse([]byte(`{"Records":[]}`)); err != nil || ok {
		t.Errorf("S3 event: envelope %v, %v", ok, err)
	}
	if _, _, err := sns.Parse([]byte(`not json`)); err == nil {
		t.Error("not JSON parsed")
	}
}
