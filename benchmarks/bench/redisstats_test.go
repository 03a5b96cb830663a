package bench

import (
	"testing"
	"time"
)

func TestScriptTime(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=60152,usec=3294052,usec_per_call=54.76,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hget:calls=57370,usec=148425,usec_per_call=2.59,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=2,usec=48,usec_per_call=24.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_fcall:calls=1,usec=10,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha_extra:calls=1,usec=1000000\r\n" +
		"cmdstat_script|load:calls=3,usec=300,usec_per_call=100.00\r\n"
	if got, want := scriptTime(info), (3294052+48+10)*time.Microsecond; got != want {
		t.Errorf("scriptTime = %v, want %v (evalsha, eval and fcall; not hget, script|load or a name that only starts like one)", got, want)
	}
	if got := scriptTime(""); got != 0 {
		t.Errorf("scriptTime of nothing = %v", got)
	}
}
